"""The offline parts of make rehearse's test tool (infra/rehearsal): how the front matches
API Gateway resources, and how the template is reduced to what the simulator can create
(the rehearsal itself runs in CI as `make rehearse`)."""
from __future__ import annotations

import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "infra", "rehearsal"))

import front  # noqa: E402  (infra/rehearsal/front.py)
import stack  # noqa: E402  (infra/rehearsal/stack.py)


def test_routes_prefer_literal_paths_and_bind_parameters():
    routes = sorted([front.Route("/api/v2/servers/{server}", {"GET": "f"}),
                     front.Route("/api/v2/servers/new", {"GET": "g"}),
                     front.Route("/{proxy+}", {"GET": "h"})],
                    key=lambda r: (not r.literal, -len(r.path)))
    found = [(r.path, m.groupdict()) for r in routes for m in [r.regex.match("/api/v2/servers/new")]
             if m]
    assert found[0] == ("/api/v2/servers/new", {})
    assert routes[1].regex.match("/api/v2/servers/abc").groupdict() == {"server": "abc"}
    assert routes[2].regex.match("/a/b/c").groupdict() == {"proxy": "a/b/c"}


def test_references_follow_ref_getatt_sub_and_depends_on():
    names = {"A", "B", "C", "D"}
    node = {"X": {"Ref": "A"}, "Y": {"Fn::GetAtt": ["B", "Arn"]},
            "Z": {"Fn::Sub": "${C.Endpoint}:${Stage}"}, "DependsOn": ["D"]}
    assert stack.references(node, names) == names


def test_what_moto_cannot_create_is_left_out_with_what_refers_to_it():
    template = {"Resources": {
        "Queue": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": "q"}},
        "Alarm": {"Type": "AWS::CloudWatch::Alarm", "Properties": {}},
        "Topic": {"Type": "AWS::SNS::Topic", "Properties": {}, "DependsOn": "Alarm"}},
        "Outputs": {"QueueArn": {"Value": {"Fn::GetAtt": ["Queue", "Arn"]}},
                    "TopicArn": {"Value": {"Ref": "Topic"}},
                    "Endpoint": {"Value": "x"}}}
    reduced, left_out = stack.reduce({}, {"Endpoint": "127.0.0.2"}, template)
    assert set(reduced["Resources"]) == {"Queue"}
    assert [(name, why.split(" ")[0]) for name, _, why in left_out] == [
        ("Alarm", "no"), ("Topic", "refers"), ("output TopicArn", "no")]
    assert reduced["Outputs"]["Endpoint"] == {"Value": "127.0.0.2"}


# --- make rehearse-deps: the one list of what the rehearsal needs from Debian -----------------

def _make_rehearse_deps(*args: str, user: int | None = None):
    import subprocess

    command = ["make", "--no-print-directory", "-C", ROOT, "rehearse-deps", *args]
    if user is not None:
        command = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_ci_installs_the_rehearsals_packages_through_make_rehearse_deps():
    with open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8") as fh:
        lines = [line for line in fh.read().splitlines() if not line.lstrip().startswith("#")]
    assert "make rehearse-deps" in lines
    assert lines.index("make rehearse-deps") < lines.index("make rehearse")
    assert not [line for line in lines if "debootstrap" in line or "docker.io" in line]
    with open(os.path.join(ROOT, "infra", "rehearsal", "images.py"), encoding="utf-8") as fh:
        source = fh.read()
    assert source.count("make rehearse-deps") == 3  # docker, busybox, debootstrap missing


def test_rehearse_deps_says_root_is_needed_and_installs_nothing_as_another_user():
    import shutil

    if os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("dpkg-query"):
        pytest.skip("needs root (to become another user), setpriv and dpkg-query")
    result = _make_rehearse_deps("REHEARSE_DEPS=debootstrap no-such-package-rehearse-test",
                                 user=65534)
    assert result.returncode != 0
    assert "no-such-package-rehearse-test missing; installing Debian packages needs root: " \
        "sudo make rehearse-deps" in result.stderr
    # the command names every missing package (debootstrap too, on a machine without it)
    assert re.search(r"apt-get install [^\n]*\bno-such-package-rehearse-test\b", result.stderr)


def test_rehearse_deps_does_nothing_when_everything_is_installed():
    import shutil
    import subprocess

    if not shutil.which("dpkg-query"):
        pytest.skip("not a Debian system")
    wanted = ["docker.io", "busybox-static", "debootstrap"]
    status = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Status}\\n", *wanted],
                            capture_output=True, text=True).stdout.split()
    if status != ["installed"] * 3:
        pytest.skip("the rehearsal's packages are not all installed here")
    result = _make_rehearse_deps()
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "rehearse-deps: docker.io busybox-static debootstrap installed"


# --- where the rehearsal checks delivery (REHEARSE_SERVE=1 with DELIVERY_RELAY) ---------------

def test_with_a_delivery_relay_delivery_is_checked_at_the_relay_not_the_rehearsals_mx(capsys):
    """DELIVERY_RELAY=host:port sends the deployment's mail there: the scenario reads the
    message's delivery attempt instead of waiting at its own MX (which would never see it)."""
    import types

    import scenario  # infra/rehearsal/scenario.py

    attempts = {"deliveries": [{"status": "Sent", "code": 250, "host": "127.0.0.1:19025"}]}
    asked = []

    def server_api(method, path, body=None):
        asked.append((method, path))
        return types.SimpleNamespace(json=lambda: {"data": attempts})

    class NoMX:
        def received_for(self, to):
            raise AssertionError("the rehearsal's MX is not where this mail goes")

    run = types.SimpleNamespace(relay="127.0.0.1:19025", server_api=server_api, mx=NoMX())
    scenario.Rehearsal.delivered(run, 7, "before-upgrade@example.net")
    assert asked == [("GET", "/api/v2/server/messages/7/deliveries")]
    assert "ok: message 7 was handed to DELIVERY_RELAY 127.0.0.1:19025" in capsys.readouterr().out
    attempts["deliveries"][0].update(status="SoftFail", code=None)
    with pytest.raises(SystemExit, match="rehearsal failed: message 7 was handed"):
        scenario.Rehearsal.delivered(run, 7, "before-upgrade@example.net")
