"""Property-based run of schemathesis against the local stack, driven by the served OpenAPI
document: no input may produce a server error (5xx), and every answer must fit the response
schema its operation declares (typed ``data``, no field the schema lacks). Bounded (examples per operation, two
workers) so it stays within a few minutes in CI; marked `schemathesis` to run it alone:
`pytest -m schemathesis`."""
from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from tests.conftest import TEST_ADMIN_KEY

pytestmark = pytest.mark.schemathesis

MAX_EXAMPLES = os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "5")


@pytest.mark.timeout(420)
def test_no_server_errors_and_answers_fit_their_schemas(stack, tenant, tmp_path):
    schemathesis = os.path.join(os.path.dirname(sys.executable), "schemathesis")
    junit = tmp_path / "junit.xml"
    command = [
        schemathesis, "run", f"{stack.base_url}/api/v2/openapi.json",
        "--checks", "not_a_server_error,response_schema_conformance",
        "--max-examples", MAX_EXAMPLES, "--phases", "examples,coverage,fuzzing",
        "--no-shrink", "--seed", os.environ.get("SCHEMATHESIS_SEED", "2"),
        "--generation-database", "none", "--workers", "2", "--max-time", "150",
        # Both credentials on every request: each route reads the header of its own surface.
        "--header", f"X-Admin-API-Key: {TEST_ADMIN_KEY}",
        "--header", f"X-Server-API-Key: {tenant.api_key}",
        "--report", "junit", "--report-junit-path", str(junit),
        # Revoking the admin key would turn the rest of the run (and later tests) into 401s.
        "--exclude-operation-id", "revoke_admin_key",
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=400,
                                env={**os.environ, "NO_COLOR": "1"})
    finally:
        _restore_shared_state()
    output = result.stdout + result.stderr
    assert junit.exists(), output[-5000:]
    cases = ET.parse(junit).getroot().iter("testcase")
    failures = []
    tested = 0
    for case in cases:
        tested += 1
        for failure in case.findall("failure"):
            failures.append(f"{case.get('name')}: {(failure.get('message') or '')[:500]}")
    assert tested > 50, output[-5000:]
    # Schemathesis' own generator errors (reported as <error>) are not the API's fault; only
    # check failures count. The failing input is in the output (curl line) for reproduction.
    assert not failures, "\n".join(failures) + "\n" + output[-8000:]


def _restore_shared_state() -> None:
    """The run may have suspended or disabled things other tests share: the seeded admin key
    is made usable again (seed_key un-revokes it)."""
    from tests.support import all_tenants
    from chalicelib.services.accounts import admin_keys

    with all_tenants() as db:
        admin_keys.seed_key(db, TEST_ADMIN_KEY)
