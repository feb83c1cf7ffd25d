"""`/sandbox/watches` lists the watches open now by User-Agent and path, as a benchmark needs to know
that the operator watches before it applies objects 'at once' to it; a watch that ends leaves the list."""

from __future__ import annotations

import asyncio

import httpx

from specpilot_harness.sandbox.cluster import Sandbox

CMS = "/api/v1/namespaces/default/configmaps"


def test_open_watches_are_listed_until_they_end() -> None:
    async def run() -> None:
        sandbox = Sandbox()
        url = await sandbox.start(install_crd=False)
        access = sandbox.access
        try:
            async with httpx.AsyncClient(base_url=url, headers=access.headers, verify=access.ssl_context(),
                                         timeout=10) as http:
                assert (await http.get("/sandbox/watches")).json() == {"watches": []}
                async with http.stream("GET", CMS, params={"watch": "true", "timeoutSeconds": "1"},
                                       headers={"User-Agent": "specpilot/op-1 kopf"}) as watch:
                    for _ in range(50):
                        listed = (await http.get("/sandbox/watches")).json()["watches"]
                        if listed:
                            break
                        await asyncio.sleep(0.05)
                    assert listed == [["specpilot/op-1 kopf", CMS]]
                    await watch.aread()  # the server ends it after timeoutSeconds
                assert (await http.get("/sandbox/watches")).json() == {"watches": []}
        finally:
            await sandbox.stop()
    asyncio.run(run())
