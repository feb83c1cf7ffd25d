"""The sandbox API server refuses what a real one refuses: requests without the bearer token of its
kubeconfig, bodies in media types it does not read (a browser's text/plain form post) and NaN/Infinity
in JSON; and web pages and foreign Host names (DNS rebinding)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from specpilot_harness.sandbox.cluster import Sandbox
from specpilot_harness.sandbox.kubeconfig import Access

KUBECTL = Path(__file__).resolve().parents[2] / ".tools" / "bin" / "kubectl"

CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}}
CMS = "/api/v1/namespaces/default/configmaps"


def _run(test: Any) -> Any:
    async def run() -> Any:
        sandbox = Sandbox()
        url = await sandbox.start(install_crd=False)
        try:
            access = sandbox.access
            async with httpx.AsyncClient(base_url=url, headers=access.headers, verify=access.ssl_context(),
                                         timeout=10) as http:
                return await test(sandbox, http)
        finally:
            await sandbox.stop()
    return asyncio.run(run())


def test_web_pages_and_foreign_host_names_are_refused() -> None:
    async def test(sandbox: Sandbox, http: httpx.AsyncClient) -> None:
        page = await http.post(CMS, json=CM, headers={"Origin": "https://attacker.example"})
        assert page.status_code == 403
        rebound = await http.get(CMS, headers={"Host": "attacker.example:16443"})
        assert rebound.status_code == 403
        assert (await http.get(CMS)).status_code == 200
        assert (await http.get(CMS, headers={"Host": "localhost:1"})).status_code == 200
    _run(test)


def test_only_the_media_types_a_real_api_server_reads_are_accepted() -> None:
    async def test(sandbox: Sandbox, http: httpx.AsyncClient) -> None:
        auth: dict[str, str] = {}
        plain = await http.post(CMS, content=b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"p"}}',
                                headers={**auth, "Content-Type": "text/plain"})
        assert plain.status_code == 415 and plain.json()["reason"] == "UnsupportedMediaType"
        form = await http.post(CMS, content=b"a=b", headers={**auth, "Content-Type": "application/x-www-form-urlencoded"})
        assert form.status_code == 415
        assert (await http.post(CMS, json=CM, headers=auth)).status_code == 201
        untyped = await http.post(CMS, content=b'{"metadata":{"name":"u"}}', headers=auth)  # read as JSON
        assert untyped.status_code == 201, untyped.text
        patch_as_json = await http.patch(f"{CMS}/c", json={"data": {"a": "c"}}, headers=auth)
        assert patch_as_json.status_code == 415  # a PATCH must name its format
        for media in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            ok = await http.patch(f"{CMS}/c", content=b'{"data":{"a":"d"}}', headers={**auth, "Content-Type": media})
            assert ok.status_code == 200, (media, ok.text)
        listed = await http.get(CMS, headers=auth)
        assert [i["metadata"]["name"] for i in listed.json()["items"]] == ["c", "u"]
    _run(test)


def test_non_finite_numbers_are_refused() -> None:
    async def test(sandbox: Sandbox, http: httpx.AsyncClient) -> None:
        auth: dict[str, str] = {}
        await http.post(CMS, json=CM, headers=auth)
        for body, media in ((b'{"metadata":{"labels":{"x":NaN}}}', "application/merge-patch+json"),
                            (b'{"metadata":{"labels":{"x":-Infinity}}}', "application/merge-patch+json"),
                            (b"metadata:\n  labels:\n    x: .nan\n", "application/apply-patch+yaml")):
            got = await http.patch(f"{CMS}/c", content=body, headers={**auth, "Content-Type": media},
                                   params={"fieldManager": "t"})
            assert got.status_code == 400 and got.json()["reason"] == "BadRequest", (body, got.text)
    _run(test)


def test_only_requests_with_the_kubeconfig_token_over_tls_are_served(tmp_path: Path) -> None:
    async def test(sandbox: Sandbox, http: httpx.AsyncClient) -> None:
        kubeconfig = sandbox.write_kubeconfig(tmp_path / "kubeconfig")
        assert kubeconfig.stat().st_mode & 0o077 == 0
        access = Access.read(kubeconfig)
        assert access == sandbox.access and access.url.startswith("https://127.0.0.1:")
        async with httpx.AsyncClient(base_url=access.url, verify=access.ssl_context(), timeout=10) as anonymous:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {access.token}"}):
                refused = await anonymous.get(CMS, headers=headers)
                assert refused.status_code == 401, headers
                assert refused.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                          "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
            assert (await anonymous.post(CMS, json=CM)).status_code == 401
            assert (await anonymous.get("/sandbox/faults")).status_code == 401
            assert (await anonymous.get(CMS, headers=access.headers)).status_code == 200
        async with httpx.AsyncClient(timeout=5) as plain:
            with pytest.raises(httpx.TransportError):  # the port speaks TLS only: a token never goes in clear
                await plain.get(access.url.replace("https:", "http:") + CMS, headers=access.headers)
        listed = await asyncio.to_thread(subprocess.run, [str(KUBECTL), "--kubeconfig", str(kubeconfig), "get",
                                                          "configmaps", "-o", "name"], capture_output=True, text=True)
        assert listed.returncode == 0 and listed.stdout.strip() == "", listed.stderr
    _run(test)


def test_sizes_are_a_real_api_servers() -> None:
    """A write over 3 MiB is refused at the door (413), an object over etcd's 1.5 MiB at the store (500):
    what an operator that lets pod-supplied text into a status meets on a real cluster."""
    async def test(sandbox: Sandbox, http: httpx.AsyncClient) -> None:
        huge = await http.post(CMS, json={**CM, "metadata": {"name": "huge"}, "data": {"a": "x" * (3 << 20)}})
        assert huge.status_code == 413 and huge.json()["reason"] == "RequestEntityTooLarge"
        large = await http.post(CMS, json={**CM, "metadata": {"name": "large"}, "data": {"a": "x" * (2 << 20)}})
        assert large.status_code == 500 and "request is too large" in large.json()["message"]
        assert (await http.get(f"{CMS}/large")).status_code == 404
        assert (await http.post(CMS, json=CM)).status_code == 201
        grown = await http.patch(f"{CMS}/c", json={"data": {"a": "x" * (2 << 20)}},
                                 headers={"Content-Type": "application/merge-patch+json"})
        assert grown.status_code == 500
        assert (await http.get(f"{CMS}/c")).json()["data"] == {"a": "b"}  # left as it was
    _run(test)
