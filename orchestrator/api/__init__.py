"""All that knows HTTP, apart from the app that assembles it (orchestrator/app.py).

The dialects each map their wire format onto the core's vocabulary
(``orchestrator.events``) and back, and serve their generations through
``_generation.run_generation``; ``metrics`` and ``security`` are the ASGI middleware
and the ``/metrics`` and ``/status`` routes."""
