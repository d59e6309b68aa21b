"""Serving a trained checkpoint over HTTP (``sentiment serve``; ``docs/serving.md``), one job a module:

    server.py    check the serve extra, build the model loader, listen, log, run uvicorn until a signal
    protocol.py  uvicorn's HTTP protocol with a deadline on request headers, and its 400s as {"error": ...}
    app.py       create_app() and its routes (FastAPI routers and dependencies)
    schemas.py   the request / response models, and reading a predict request's body
    guard.py     the outermost ASGI middleware: request ids, bounded bodies (413 / 408), dropped clients, 500s
    metrics.py   the Prometheus metrics
    settings.py  the server's limits and switches, and what its model loader returns
    batcher.py   micro-batching of concurrent requests

Importing any of them never imports torch: the PyTorch predictor is loaded only by the loader, in the
server's loading thread, and never with ``--onnx``.
"""
