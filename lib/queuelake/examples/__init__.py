"""Worked examples a user recognises: order events, their traffic, and a transform over them."""
