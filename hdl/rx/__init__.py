"""Receive pipeline: parse, validate, place, track SACK state, answer."""
