"""Headless Chromium driven over the DevTools protocol, for the published site's test.

Why the protocol rather than `chromium --dump-dom` per page: a user clicks through
the site and presses back, and what we must see is every request the browser
makes (an image, a stylesheet or a font fetched from outside the site) and every
console message or uncaught error. The protocol reports all three as events
(Network.requestWillBeSent, Runtime.consoleAPICalled / exceptionThrown,
Log.entryAdded), so the test clicks real links and reads what happened. The
websocket is aiohttp's (installed with s3fs, a test dependency); no browser
driver package is needed.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any


def chromium() -> str | None:
    return next((p for name in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(name))), None)


@dataclass
class Seen:
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)      # console errors, uncaught exceptions, failed loads


class Browser:
    """One headless browser with one tab; use as `async with Browser() as b`."""

    def __init__(self, timeout: float = 30.0):
        self.timeout = timeout
        self.seen = Seen()
        self._ids = iter(range(1, 1 << 30))
        self._waiting: dict[int, asyncio.Future] = {}

    async def __aenter__(self) -> "Browser":
        import aiohttp
        self._profile = tempfile.mkdtemp(prefix="cxlbench-chromium-")
        self._proc = await asyncio.create_subprocess_exec(
            chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", "--remote-debugging-port=0",
            f"--user-data-dir={self._profile}", "about:blank",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "TMPDIR": self._profile})    # its org.chromium.* scratch folders go with the profile
        url = await asyncio.wait_for(self._devtools_url(), self.timeout)
        self._http = aiohttp.ClientSession()
        self._ws = await self._http.ws_connect(url, max_msg_size=0)
        self._reader = asyncio.create_task(self._read())
        target = (await self.send("Target.createTarget", url="about:blank"))["targetId"]
        self._session = (await self.send("Target.attachToTarget", targetId=target, flatten=True))["sessionId"]
        for domain in ("Page", "Network", "Runtime", "Log"):
            await self.send(f"{domain}.enable", session=True)
        return self

    async def __aexit__(self, *exc) -> None:
        self._reader.cancel()
        await self._ws.close()
        await self._http.close()
        self._proc.kill()
        await self._proc.wait()
        shutil.rmtree(self._profile, ignore_errors=True)

    async def _devtools_url(self) -> str:
        while True:
            line = (await self._proc.stderr.readline()).decode(errors="replace")
            if not line:
                raise RuntimeError("chromium exited before it listened for DevTools")
            if m := re.search(r"DevTools listening on (ws://\S+)", line):
                return m.group(1)

    async def _read(self) -> None:
        async for msg in self._ws:
            doc = json.loads(msg.data)
            if "id" in doc and doc["id"] in self._waiting:
                self._waiting.pop(doc["id"]).set_result(doc)
            elif "method" in doc:
                self._event(doc["method"], doc.get("params", {}))

    def _event(self, method: str, p: dict[str, Any]) -> None:
        if method == "Network.requestWillBeSent":
            self.seen.requests.append(p["request"]["url"])
        elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.seen.errors.append("console: " + " ".join(str(a.get("value", a.get("description")))
                                                           for a in p.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            self.seen.errors.append("exception: " + str(p.get("exceptionDetails", {}).get("text")))
        elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
            self.seen.errors.append(f"log: {p['entry'].get('text')} ({p['entry'].get('url', '')})")
        elif method == "Network.loadingFailed":
            self.seen.errors.append(f"failed: {p.get('errorText')}")

    async def send(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        n = next(self._ids)
        msg = {"id": n, "method": method, "params": params}
        if session:
            msg["sessionId"] = self._session
        fut = asyncio.get_running_loop().create_future()
        self._waiting[n] = fut
        await self._ws.send_str(json.dumps(msg))
        doc = await asyncio.wait_for(fut, self.timeout)
        if "error" in doc:
            raise RuntimeError(f"{method}: {doc['error']}")
        return doc.get("result", {})

    async def js(self, expression: str) -> Any:
        r = await self.send("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails'].get('text')}")
        return r.get("result", {}).get("value")

    async def _settle(self, url: str | None = None, before: str | None = None) -> str:
        """Wait until the tab shows a loaded page (`url`, or any page other than `before`)."""
        end = time.monotonic() + self.timeout
        while time.monotonic() < end:
            try:
                here = await self.js("document.readyState === 'complete' ? location.href : ''")
            except RuntimeError:          # the context went away mid-navigation
                here = ""
            if here and (here == url if url else here != before):
                return here
            await asyncio.sleep(0.05)
        raise TimeoutError(f"the page did not load (waiting for {url or 'a new page'})")

    async def open(self, url: str) -> str:
        await self.send("Page.navigate", session=True, url=url)
        return await self._settle(url)

    async def _fire(self, expression: str) -> None:
        """Run an expression that navigates: the page may go away before the evaluation
        answers ("Inspected target navigated or closed"), which means it worked."""
        try:
            await self.js(expression)
        except RuntimeError as e:
            if "navigated or closed" not in str(e):
                raise

    async def click(self, selector: str) -> str:
        """Click the first element matching `selector`; the URL of the page it led to."""
        before = await self.js("location.href")
        if not await self.js(f"document.querySelector({json.dumps(selector)}) !== null"):
            raise AssertionError(f"no {selector} on {before}")
        await self._fire(f"document.querySelector({json.dumps(selector)}).click()")
        return await self._settle(before=before)

    async def back(self) -> str:
        before = await self.js("location.href")
        await self._fire("history.back()")
        return await self._settle(before=before)

    async def links(self) -> list[str]:
        """Every href and src of the page, resolved against it."""
        return await self.js("[...document.querySelectorAll('[href],[src]')].map(e => "
                             "new URL(e.getAttribute('href') || e.getAttribute('src'), location.href).href)")


def run(coro):
    return asyncio.run(coro)


__all__ = ["Browser", "chromium", "run", "Seen"]
