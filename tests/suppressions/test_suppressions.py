"""The suppression list's management API: reasons, per-stream entries, filters, import and
CSV export, through the running stack (and the submission and delivery paths honouring
per-stream entries)."""
from __future__ import annotations

import csv
import io
from datetime import timedelta

from chalicelib import clock

from tests.support.sending import rcpt, sent_ok, wait_status
from tests.support import Api, unique

SERVER = "/api/v2/server"


def stream(api, tenant, stream_type="broadcast") -> str:
    return Api.data(api.post(f"{SERVER}/streams", {"name": unique("S"),
                                                   "stream_type": stream_type},
                             server_key=tenant.api_key), 201)["stream"]["permalink"]


def listed(api, tenant, **query) -> list[dict]:
    return Api.data(api.get(tenant.server_path + "/suppressions",
                            params=query))["suppressions"]


def test_reasons_streams_and_filters(api, tenant):
    news = stream(api, tenant)
    base = tenant.server_path + "/suppressions"
    a, b, c = (f"{unique(x)}@example.net" for x in "abc")
    made = Api.data(api.post(base, {"address": a, "reason": "SpamComplaint"}), 201)
    assert made["suppression"]["reason"] == "SpamComplaint"
    assert made["suppression"]["stream"] is None and made["suppression"]["expires_at"] is None
    assert made["suppression"]["origin"] == "manual"
    made = Api.data(api.post(base, {"address": b, "reason": "Unsubscribe", "stream": news}),
                    201)["suppression"]
    assert made["stream"] == news and made["reason"] == "Unsubscribe"
    # Free text (clients from before reasons) is kept as details, reason Manual.
    made = Api.data(api.post(base, {"address": c, "reason": "asked by phone", "days": 3}),
                    201)["suppression"]
    assert made["reason"] == "Manual" and made["details"] == "asked by phone"
    assert made["expires_at"] is not None
    # A HardBounce entered by hand expires like an automatic one.
    hard = Api.data(api.post(base, {"address": f"{unique('h')}@example.net",
                                    "reason": "HardBounce"}), 201)["suppression"]
    assert hard["expires_at"] is not None
    Api.error(api.post(base, {"address": a, "stream": "no-such-stream"}), 422, "ValidationError")

    assert [s["address"] for s in listed(api, tenant, reason="Unsubscribe")] == [b]
    assert {s["address"] for s in listed(api, tenant, stream=news)} == {b}
    assert b not in {s["address"] for s in listed(api, tenant, stream="all")}
    assert a in {s["address"] for s in listed(api, tenant, stream="all")}
    assert {s["address"] for s in listed(api, tenant, origin="manual")} >= {a, b, c}
    assert listed(api, tenant, created_to="2000-01-01T00:00:00Z") == []
    permanent = {s["address"] for s in listed(api, tenant, permanent="true")}
    assert {a, b} <= permanent and c not in permanent
    expiring = {s["address"] for s in listed(api, tenant, expires_before="2100-01-01T00:00:00Z")}
    assert c in expiring and a not in expiring
    Api.error(api.get(base, params={"reason": "Bogus"}), 422, "ValidationError")
    Api.error(api.get(base, params={"stream": "nope"}), 422, "ValidationError")

    # The same address on a stream and on all streams: two entries; DELETE by stream.
    Api.data(api.post(base, {"address": b, "reason": "Manual"}), 201)
    assert len(listed(api, tenant, query=b)) == 2
    shown = Api.data(api.get(f"{base}/{b}"))["suppression"]
    assert shown["stream"] is None  # the all-streams entry first
    gone = Api.data(api.delete(f"{base}/{b}", params={"stream": news}))
    assert gone["removed"] == 1 and gone["suppression"]["stream"] == news
    assert [s["stream"] for s in listed(api, tenant, query=b)] == [None]
    assert Api.data(api.delete(f"{base}/{b}"))["removed"] == 1
    Api.error(api.get(f"{base}/{b}"), 404, "NotFound")


def test_a_stream_entry_holds_only_that_streams_mail(api, tenant, mx):
    news = stream(api, tenant)
    to = rcpt("per-stream")
    Api.data(api.post(tenant.server_path + "/suppressions",
                      {"address": to, "reason": "Unsubscribe", "stream": news}), 201)
    [held] = sent_ok(api, tenant, to=[to], stream=news)["recipients"]
    assert held["status"] == "Held"
    [sent] = sent_ok(api, tenant, to=[to])["recipients"]
    wait_status(api, tenant, sent["id"], "Sent")


def test_the_worker_holds_by_stream_at_retry(api, tenant, mx, monkeypatch):
    """An entry added while a message waits for its retry: the delivery worker holds the
    message of that stream and delivers the other stream's."""
    monkeypatch.setenv("TIME_SCALE", "0.1")  # first retry after 6 s
    news = stream(api, tenant)
    to = rcpt("late")
    mx.script = ["rcpt:451 4.3.0 try again later", "rcpt:451 4.3.0 try again later"]
    [on_news] = sent_ok(api, tenant, to=[to], stream=news)["recipients"]
    [on_default] = sent_ok(api, tenant, to=[to])["recipients"]
    wait_status(api, tenant, on_news["id"], "SoftFail")
    wait_status(api, tenant, on_default["id"], "SoftFail")
    Api.data(api.post(tenant.server_path + "/suppressions",
                      {"address": to, "reason": "Unsubscribe", "stream": news}), 201)
    shown = wait_status(api, tenant, on_news["id"], "Held", timeout=60)
    assert shown["events"][-1]["event"] == "MessageHeld"
    wait_status(api, tenant, on_default["id"], "Sent", timeout=60)


def test_import_counts_and_skips(api, tenant):
    news = stream(api, tenant)
    base = tenant.server_path + "/suppressions"
    existing = f"{unique('old')}@example.net"
    Api.data(api.post(base, {"address": existing}), 201)
    fresh = [f"{unique('imp')}@example.net" for _ in range(3)]
    body = {"suppressions": [
        {"address": fresh[0]},
        {"address": fresh[1], "reason": "SpamComplaint"},
        {"address": fresh[2].upper(), "reason": "Unsubscribe", "stream": news},
        {"address": fresh[0]},                       # a repeat in the same call
        {"address": existing},                       # already suppressed
        {"address": "not an address"},
        {"address": fresh[1], "reason": "Whatever"},
        {"address": fresh[1], "stream": "missing"},
        "just a string",
    ]}
    result = Api.data(api.post(base + "/import", body))
    assert result["imported"] == 3 and result["skipped"] == 6
    assert [e["index"] for e in result["errors"]] == [5, 6, 7, 8]
    assert result["errors"][1]["field"] == "suppressions[6].reason"
    by_address = {s["address"]: s for s in listed(api, tenant, origin="import")}
    assert set(by_address) == {fresh[0], fresh[1], fresh[2].lower()}
    assert by_address[fresh[1]]["reason"] == "SpamComplaint"
    assert by_address[fresh[2].lower()]["stream"] == news
    assert by_address[fresh[0]]["reason"] == "Manual"
    # Importing the same list again imports nothing.
    again = Api.data(api.post(base + "/import", {"suppressions": body["suppressions"][:3]}))
    assert again == {"imported": 0, "skipped": 3, "errors": []}
    # A lapsed entry (expired, not yet swept) makes way for an imported one.
    lapsing = f"{unique('lapse')}@example.net"
    Api.data(api.post(base, {"address": lapsing, "days": 1}), 201)
    clock.advance(timedelta(days=2))
    assert listed(api, tenant, query=lapsing) == []
    assert Api.data(api.post(base + "/import", {"suppressions": [
        {"address": lapsing, "reason": "Unsubscribe"}]}))["imported"] == 1
    [entry] = listed(api, tenant, query=lapsing, include_expired="true")
    assert entry["reason"] == "Unsubscribe" and entry["expires_at"] is None
    # The limit: 10,000 a call.
    too_many = {"suppressions": [{"address": f"x{i}@example.net"} for i in range(10_001)]}
    Api.error(api.post(base + "/import", too_many), 422, "ValidationError")


def test_import_of_ten_thousand_in_one_call(api, tenant):
    base = tenant.server_path + "/suppressions"
    prefix = unique("bulk")
    entries = [{"address": f"{prefix}-{i}@example.net"} for i in range(10_000)]
    result = Api.data(api.post(base + "/import", {"suppressions": entries}))
    assert result == {"imported": 10_000, "skipped": 0, "errors": []}
    page = Api.data(api.get(base, params={"query": prefix, "per_page": 1}))
    assert page["pagination"]["total"] == 10_000


def test_export_is_csv_with_the_same_filters(api, tenant):
    news = stream(api, tenant)
    base = tenant.server_path + "/suppressions"
    a, b = f"{unique('ea')}@example.net", f"{unique('eb')}@example.net"
    Api.data(api.post(base, {"address": a, "reason": "SpamComplaint"}), 201)
    Api.data(api.post(base, {"address": b, "reason": "Unsubscribe", "stream": news,
                             "details": "=HYPERLINK(\"http://evil\")"}), 201)
    response = api.get(base + "/export")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/csv")
    assert "attachment" in response.headers["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.text)))
    by_address = {r["address"]: r for r in rows}
    assert by_address[a]["reason"] == "SpamComplaint" and by_address[a]["stream"] == ""
    assert by_address[b]["stream"] == news and by_address[b]["origin"] == "manual"
    assert by_address[b]["details"].startswith("'=")  # never a live spreadsheet formula
    assert by_address[a]["created_at"].endswith("Z") and by_address[a]["expires_at"] == ""
    only = list(csv.DictReader(io.StringIO(
        api.get(base + "/export", params={"reason": "Unsubscribe"}).text)))
    assert [r["address"] for r in only] == [b]
    Api.error(api.get(base + "/export", params={"reason": "x"}), 422, "ValidationError")
    # Export needs the same access as reading the list.
    Api.error(api.get(base + "/export", admin_key=""), 401, "Unauthorized")


def test_odd_input_is_a_422_or_a_skip_never_a_500(api, tenant):
    base = tenant.server_path + "/suppressions"
    odd = [{"address": 5}, {"address": "a@b.example", "stream": 5},
           {"address": "a@b.example", "reason": ["HardBounce"]}, None, [],
           {"address": "x" * 1000 + "@a.example"}, {"address": "a@b.example", "stream": ""},
           {}]
    result = Api.data(api.post(base + "/import", {"suppressions": odd}))
    assert result["imported"] == 0 and result["skipped"] == len(odd)
    assert [e["index"] for e in result["errors"]] == list(range(len(odd)))
    for body in ({"suppressions": "nope"}, {"suppressions": {"address": "a@b.example"}}, {}):
        Api.error(api.post(base + "/import", body), *(
            (400, "ParameterMissing") if body == {} else (422, "ValidationError")))
    Api.error(api.post(base, {"address": "a@b.example", "stream": ""}), 422, "ValidationError")
    Api.error(api.post(base, {"address": "a@b.example", "reason": 7}), 422, "ValidationError")
    Api.error(api.get(base + "/export", params={"created_from": "yesterday"}), 422,
              "ValidationError")
    Api.error(api.delete(f"{base}/a@b.example", params={"stream": "nope"}), 404, "NotFound")
