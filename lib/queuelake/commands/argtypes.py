"""Argument types the commands share: a value out of range is a usage error (exit 2) naming the
option, not a failure far inside the run. Why: ``--max-messages -1`` reached the database as a
negative LIMIT (the queue failed), and ``--max-messages 0`` or ``--max-seconds -5`` drained nothing
and logged that the queue was empty with rows waiting (a review)."""

from __future__ import annotations

import argparse


def at_least_one(text: str) -> int:
    """A whole number, at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: at least 1")
    return value


def seconds(text: str) -> float:
    """A number of seconds, more than 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text}: more than 0 seconds")
    return value
