"""Adapters to model endpoints: an LLM service is an external platform like any other."""
