"""Renderers that turn a Result into the text a transcript shows."""
