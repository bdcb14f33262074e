"""HTTP dialects. Each maps its wire format onto the core's vocabulary
(``orchestrator.events``) and back, and serves its generations through
``_generation.run_generation``: all that knows HTTP lives in this package."""
