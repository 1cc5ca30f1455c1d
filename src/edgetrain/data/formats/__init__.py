"""Loaders for public activity-recognition sets in the exact layout users download."""
