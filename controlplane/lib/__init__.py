"""Small helpers shared by every app of the control plane."""
