"""infersim: a discrete-event simulator and capacity planner for LLM inference."""

__version__ = "0.1.0"
