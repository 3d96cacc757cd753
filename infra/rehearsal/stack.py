"""What of infra/template.yaml the simulator can create (a test tool).

Each resource is tried on its own (with the resources it refers to) in a throwaway in-process
moto; one that fails, or refers to one that failed, is left out of the rehearsal's copy of
the template and reported with the reason. Outputs that refer to left-out resources take the
rehearsal's stand-in values (its PostgreSQL, the secrets it made through the Secrets Manager
API); stand-ins also replace outputs of resources moto only records (the RDS instance runs no
database). infra/deploy.sh then applies the reduced template as it applies the real one.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(os.path.dirname(HERE), "template.yaml")
SUB_NAME = re.compile(r"\$\{([A-Za-z0-9]+)(?:\.[A-Za-z0-9.]+)?\}")


def load(path: str = TEMPLATE) -> dict:
    from cfnlint.decode import decode

    template, matches = decode(path)
    if matches:
        raise SystemExit(f"{path}: {matches}")
    return json.loads(json.dumps(template))  # plain dicts and strings


def references(node: Any, names: set[str]) -> set[str]:
    """Resource names ``node`` refers to (Ref, GetAtt, Sub, DependsOn)."""
    found: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Ref" and value in names:
                found.add(value)
            elif key == "Fn::GetAtt":
                target = value[0] if isinstance(value, list) else value.split(".")[0]
                found.add(target)
            elif key == "Fn::Sub":
                text = value[0] if isinstance(value, list) else value
                found |= {m for m in SUB_NAME.findall(text) if m in names}
                if isinstance(value, list):
                    found |= references(value[1], names)
            elif key == "DependsOn":
                found |= set([value] if isinstance(value, str) else value)
            else:
                found |= references(value, names)
    elif isinstance(node, list):
        for item in node:
            found |= references(item, names)
    return found & names


def _closure(name: str, resources: dict, names: set[str]) -> set[str]:
    todo, seen = [name], set()
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo += references(resources[current], names)
    return seen


def _order(resources: dict) -> list[str]:
    names, done, order = set(resources), set(), []
    while len(order) < len(resources):
        ready = [n for n in resources if n not in done and references(resources[n], names) <= done]
        if not ready:
            raise SystemExit("circular references in the template")
        for name in ready:
            done.add(name)
            order.append(name)
    return order


def _creates(template: dict, parameters: dict[str, str]) -> str | None:
    """None when moto creates the stack, else why not."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
        subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.9.{i}.0/24")["Subnet"]["SubnetId"]
                   for i in range(2)]
        values = dict(parameters, VpcId=vpc, PrivateSubnetIds=",".join(subnets),
                      PublicSubnetIds=",".join(subnets))
        try:
            boto3.client("cloudformation", region_name="us-east-1").create_stack(
                StackName="probe", TemplateBody=json.dumps(template),
                Capabilities=["CAPABILITY_IAM"],
                Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in values.items()
                            if k in template.get("Parameters", {})])
        except Exception as exc:  # noqa: BLE001  (any failure: not creatable here)
            return f"{type(exc).__name__}: {str(exc)[:120]}"
    return None


def reduce(parameters: dict[str, str], stand_ins: dict[str, str],
           template: dict | None = None) -> tuple[dict, list[tuple[str, str, str]]]:
    """(the template moto can create, [(resource, type, why not)]). ``stand_ins``: output
    name -> value, used for outputs that cannot be computed and for those it names."""
    template = template or load()
    resources = template["Resources"]
    names = set(resources)
    kept: set[str] = set()
    left_out: list[tuple[str, str, str]] = []
    from moto.cloudformation.parsing import get_model_map

    known = get_model_map()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "rehearsal")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "rehearsal")
    for name in _order(resources):
        missing = sorted(references(resources[name], names) - kept)
        if missing:
            left_out.append((name, resources[name]["Type"], "refers to " + ", ".join(missing)))
            continue
        if resources[name]["Type"] not in known:  # moto would skip it with a warning
            left_out.append((name, resources[name]["Type"], "no such type in moto's CloudFormation"))
            continue
        probe = dict(template, Outputs={})
        probe["Resources"] = {n: resources[n] for n in _closure(name, resources, names)}
        why = _creates(probe, parameters)
        if why:
            left_out.append((name, resources[name]["Type"], why))
        else:
            kept.add(name)
    outputs = {}
    for name, output in template.get("Outputs", {}).items():
        if name in stand_ins:
            outputs[name] = {"Value": stand_ins[name]}
        elif references(output, names) <= kept:
            outputs[name] = output
        else:
            left_out.append((f"output {name}", "-", "no stand-in for a left-out resource"))
    reduced = dict(template, Outputs=outputs)
    reduced["Resources"] = {n: r for n, r in resources.items() if n in kept}
    return reduced, left_out
