"""The HTTP face: a Starlette app serving the extender verbs as kube-scheduler calls them.

``POST /filter``, ``/prioritize``, ``/bind``, ``/preempt`` (JSON in, JSON out, status 200 on
every answer the extender computed, with any problem in ``Error``), ``GET /healthz`` (200
``{"ok": true}``, or 503 with the reason in ``Error`` while ``health()`` names one: with an
API server, :meth:`~interplace.serve.KubeSync.problem`) and ``GET /state`` (the booked
GPUs, and the pods whose bookings are still assumed: :meth:`Extender.snapshot`). Malformed
JSON or a request the verb cannot read gets 400 with ``{"Error": ...}``; a failure of the
service's own 500 with ``{"Error": ...}`` (and the traceback in the log); an unknown path
404; a body over ``max_body`` bytes 413. The verbs and ``/state`` (which waits for the book) run
in a worker thread, so neither a slow scoring nor a wait for the book's lock blocks the event
loop (``/healthz`` above all). A prioritize call's deadline runs from the request's arrival
here (a wait for a worker thread counts).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from interplace.errors import InputError, first_line
from interplace.serve._extender import Extender

__all__ = ["MAX_BODY", "build_app"]

MAX_BODY = 4 * 1024 * 1024
"""Largest request body accepted (4 MiB: a NodeList of a few hundred nodes)."""

log = logging.getLogger("interplace.serve")


def build_app(
    extender: Extender,
    *,
    max_body: int = MAX_BODY,
    health: Callable[[], str | None] | None = None,
) -> Any:
    """The ASGI application (needs ``interplace[serve]``: Starlette); ``health`` says why
    the service is unhealthy, or None (module docstring)."""
    try:
        from starlette.applications import Starlette
        from starlette.concurrency import run_in_threadpool
        from starlette.requests import Request
        from starlette.responses import JSONResponse, Response
        from starlette.routing import Route
    except ImportError:
        raise InputError('interplace serve needs its extra: pip install "interplace[serve]"') \
            from None

    async def read(request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_body:
            raise _TooLarge
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_body:
                raise _TooLarge
        try:
            return json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"malformed JSON: {exc}") from None

    def verb(name: str) -> Any:
        async def handle(request: Request) -> Response:
            arrived = time.monotonic()
            try:
                args = await read(request)
                if not isinstance(args, dict):
                    raise InputError(f"{name} expects a JSON object")
                if name in ("filter", "prioritize") and args.get("Pod") is not None:
                    extender.remember(args["Pod"])
                if name == "prioritize":
                    result = await run_in_threadpool(extender.prioritize, args,
                                                     arrived=arrived)
                else:
                    result = await run_in_threadpool(getattr(extender, name), args)
            except _TooLarge:
                return JSONResponse({"Error": f"request body over {max_body} bytes"},
                                    status_code=413)
            except InputError as exc:
                log.info("%s: bad request: %s", name, exc)
                return JSONResponse({"Error": str(exc)}, status_code=400)
            except Exception as exc:  # a fault of the service's own: still the wire's JSON
                log.exception("%s: failed", name)
                return JSONResponse({"Error": f"{name} failed: {first_line(exc)}"},
                                    status_code=500)
            return JSONResponse(result)

        return handle

    async def healthz(request: Request) -> Response:
        problem = None if health is None else health()
        if problem is not None:
            return JSONResponse({"ok": False, "Error": problem}, status_code=503)
        return JSONResponse({"ok": True})

    async def state(request: Request) -> Response:
        return JSONResponse(await run_in_threadpool(extender.snapshot))

    routes = [Route(f"/{v}", verb(v), methods=["POST"])
              for v in ("filter", "prioritize", "bind", "preempt")]
    routes += [Route("/healthz", healthz), Route("/state", state)]
    return Starlette(routes=routes)


class _TooLarge(Exception):
    pass
