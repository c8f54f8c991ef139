"""Conversation logs: uploaded or imported logs of customer conversations, their analysis and suggestions."""
