"""Conversation log services: storing logs, analysing them, applying suggestions."""
