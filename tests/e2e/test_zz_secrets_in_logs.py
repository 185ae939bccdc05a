"""Acceptance item 8: no secret value from any config appears in any gateway log of the run.

Runs last (marker `last`, see conftest.py), so it sees the stdout and stderr of every gateway
the session started. Every secret the tests put into a config was made by `new_secret()` (or
found in a written config by `collect_secrets()`), so the list is complete. It first drives a
gateway of its own through the paths most likely to leak: every auth type and secret source,
debug logging, JSON and text log formats, rejected keys, an upstream 401, and broken config
edits whose offending line holds a secret.
"""

from __future__ import annotations

import base64
import copy
import re

import httpx
import pytest
from harness import (
    GATEWAY_LOGS,
    MODERN_VERSION,
    RECORD_DIR,
    SECRETS_USED,
    RawMcp,
    gateway_config,
    headers_seen,
    key,
    new_secret,
    recorded_logs,
    recorded_secrets,
    rest_call,
    rest_list,
    server,
    wait_until,
    write_text,
)

RANDOM_PART = re.compile(r"[0-9a-f]{24}$")


def _exercise(gateways, rust_upstream, python_upstream, tmp_path, *, log_format: str, debug: bool) -> None:
    s = {
        n: new_secret(n) for n in ("bearer", "apikey-env", "basic-file", "token", "verbatim", "static", "locked", "py")
    }
    client_inline, client_env = new_secret("client-inline"), new_secret("client-env")
    secret_file = tmp_path / f"basic-{log_format}.secret"
    secret_file.write_text(f"svc:{s['basic-file']}\n")
    env = {"SBX_APIKEY": s["apikey-env"], "SBX_CLIENT_KEY": client_env}
    if debug:
        env["RUST_LOG"] = "debug"
    servers = [
        server("bearer", rust_upstream.mcp_url, auth={"type": "bearer", "secret": {"value": s["bearer"]}}),
        server(
            "apikey",
            rust_upstream.mcp_url,
            auth={"type": "apiKey", "secret": {"env": "SBX_APIKEY"}, "header": "X-Key", "prefix": "K "},
        ),
        server("basic", rust_upstream.mcp_url, auth={"type": "basic", "secret": {"file": str(secret_file)}}),
        server("token", rust_upstream.mcp_url, auth={"type": "token", "secret": s["token"]}),
        server("verbatim", rust_upstream.mcp_url, auth={"type": "authorization", "secret": f"Custom {s['verbatim']}"}),
        server("static", rust_upstream.mcp_url, headers={"static": [{"name": "X-Static", "value": s["static"]}]}),
        server("locked", rust_upstream.variant_url("status=401"), auth={"type": "bearer", "secret": s["locked"]}),
        server("py", python_upstream.mcp_url, auth={"type": "bearer", "secret": s["py"]}),
    ]
    names = [x["name"] for x in servers]
    config = gateway_config(
        servers,
        [key("inline", client_inline, names), {"name": "env", "secret": {"env": "SBX_CLIENT_KEY"}, "servers": names}],
    )
    gw = gateways.start(config, env=env, log_format=log_format, name=f"secrets-{log_format}")

    # Every credential is really in use (so a leak would have had a chance to happen).
    for era in ("legacy", MODERN_VERSION):
        for client_key in (client_inline, client_env):
            with RawMcp(gw.mcp_url(), client_key, era) as mcp:
                mcp.list_all_tools()
                seen = {n: headers_seen(mcp.call_tool(f"{n}__request_headers").result) for n in names if n != "locked"}
                assert seen["bearer"]["authorization"] == f"Bearer {s['bearer']}"
                assert seen["apikey"]["x-key"] == f"K {s['apikey-env']}"
                assert s["basic-file"] not in seen["basic"]["authorization"]  # base64 of svc:<secret>
                assert seen["basic"]["authorization"].startswith("Basic ")
                assert seen["token"]["authorization"] == f"Token {s['token']}"
                assert seen["verbatim"]["authorization"] == f"Custom {s['verbatim']}"
                assert seen["static"]["x-static"] == s["static"]
                assert seen["py"]["authorization"] == f"Bearer {s['py']}"
                SECRETS_USED.add(seen["basic"]["authorization"].removeprefix("Basic "))
                assert (
                    base64.b64decode(seen["basic"]["authorization"].removeprefix("Basic ")).decode()
                    == f"svc:{s['basic-file']}"
                )
                mcp.call_tool("locked__add", {"a": 1, "b": 1})  # upstream answers 401
                # Tool arguments must not appear at INFO either (at debug they may).
                argument = "not-a-secret-argument" if debug else new_secret("argument")
                mcp.call_tool("bearer__echo", {"text": argument})
    with RawMcp(gw.mcp_url(), new_secret("wrong-key"), MODERN_VERSION) as stranger:
        assert stranger.call_tool("bearer__add", {"a": 1, "b": 1}).status == 401
    assert rest_call(gw, new_secret("wrong-rest-key"), "bearer__add").status_code == 401
    assert rest_list(gw, client_inline).status_code == 200
    rest_call(gw, client_inline, "locked__add", {"a": 1, "b": 1})

    # Broken edits whose offending line holds a secret: the error must name the place, not
    # quote the value.
    offset = len(gw.logs())
    unterminated = new_secret("yaml-broken")
    good_text = gw.config_path.read_text()
    write_text(
        gw.config_path,
        good_text
        + f'\n  - name: broken\n    url: "http://127.0.0.1:1/mcp\n    auth: {{type: bearer, secret: "{unterminated}\n',
    )
    wait_until(lambda: gw.logs()[offset:].strip() != "", 5, what="the broken YAML to be reported")

    offset = len(gw.logs())
    bad_value = copy.deepcopy(config)
    crlf = new_secret("crlf-header")
    bad_value["servers"][5]["headers"]["static"][0]["value"] = f"{crlf}\r\nX-Injected: 1"
    gw.write_config(bad_value)
    wait_until(
        lambda: "servers[5].headers.static[0]" in gw.logs()[offset:],
        5,
        what="the CR/LF header value to be rejected naming its field",
    )

    offset = len(gw.logs())
    bad_header = copy.deepcopy(config)
    bad_header["servers"][1]["auth"]["header"] = "X Key"
    bad_header["servers"][1]["auth"]["secret"] = new_secret("next-to-bad-header")
    gw.write_config(bad_header)
    wait_until(lambda: "servers[1].auth.header" in gw.logs()[offset:], 5, what="the bad header name to be rejected")

    gw.write_config_applied(config)
    assert gw.proc.alive()

    # Metrics carry names, never secrets (docs/architecture.md, invariant 8).
    metrics = httpx.get(f"{gw.internal_url}/metrics", timeout=5)
    assert metrics.status_code == 200
    assert "locked" in metrics.text, "per-server metrics expected (upstream latency by server)"
    in_metrics = sorted(v.rsplit("-", 1)[0] for v in SECRETS_USED if v in metrics.text)
    assert in_metrics == [], f"secrets in /metrics: {in_metrics}"
    gw.stop()  # flush everything it had to say


def test_no_secret_in_any_gateway_log(gateways, rust_upstream, python_upstream, tmp_path):
    _exercise(gateways, rust_upstream, python_upstream, tmp_path, log_format="json", debug=True)
    _exercise(gateways, rust_upstream, python_upstream, tmp_path, log_format="text", debug=False)

    logs = [p for p in recorded_logs() if p.exists()]
    assert logs, "no gateway log files were recorded"
    if RECORD_DIR is not None:  # run after the parallel workers: their logs must be in the grep
        assert len(logs) > len(set(GATEWAY_LOGS)), f"no other process recorded a gateway log in {RECORD_DIR}"
    assert sum(p.stat().st_size for p in logs) > 0, "the gateways logged nothing at all: the grep proves nothing"
    needles: dict[str, str] = {}
    for value in recorded_secrets():
        needles[value] = value
        m = RANDOM_PART.search(value)
        if m:
            needles[m.group(0)] = value  # the random part alone, in case a label was stripped
    leaks: dict[tuple, str] = {}
    for path in logs:
        text = path.read_text("utf-8", "replace")
        for needle, value in needles.items():
            if needle in text and (path, value) not in leaks:
                line = next(ln for ln in text.splitlines() if needle in ln)
                label = value.rsplit("-", 1)[0]
                leaks[(path, value)] = f"{path}: secret {label!r} appears in: {line[:300]}"
    assert not leaks, f"{len(leaks)} secret(s) found in gateway logs:\n" + "\n".join(leaks.values())


pytestmark = pytest.mark.last
