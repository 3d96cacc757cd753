"""The offline parts of make rehearse's test tool (infra/rehearsal): how the front matches
API Gateway resources, and how the template is reduced to what the simulator can create
(the rehearsal itself runs in CI as `make rehearse`)."""
from __future__ import annotations

import os
import sys

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
