"""HTTP dialects. Each maps its wire format onto ``orchestrator.generation`` and back."""
