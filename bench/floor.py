"""The floor for admission benchmarks: the same stack (uvicorn + TLS + orjson) answering "allowed".

It parses the review and echoes the uid, and does nothing else, so vramgate's cost over it is the
cost of its decisions. ``python -m bench.floor --port P --tls-cert C --tls-key K``.
"""

from __future__ import annotations

import argparse
from typing import Any

import orjson
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response


def create_floor_app() -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    async def answer(request: Request) -> Response:
        review: Any = orjson.loads(await request.body())
        uid = review.get("request", {}).get("uid", "")
        body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": uid, "allowed": True}}
        return Response(orjson.dumps(body), media_type="application/json")

    app.add_api_route("/validate", answer, methods=["POST"])
    app.add_api_route("/mutate", answer, methods=["POST"])

    @app.get("/readyz")
    async def readyz() -> Response:
        return Response(b"{}", media_type="application/json")

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls-cert", required=True)
    parser.add_argument("--tls-key", required=True)
    args = parser.parse_args()
    uvicorn.run(create_floor_app(), host="127.0.0.1", port=args.port, ssl_certfile=args.tls_cert,
                ssl_keyfile=args.tls_key, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
