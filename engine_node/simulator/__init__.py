"""A stand-in for vLLM's OpenAI server, speaking its HTTP protocol with simulated numbers (demos, load tests, CI)."""
