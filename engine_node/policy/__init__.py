"""Request policy for the engine-node gateway: what a customer message is about, decided on the CPU."""
