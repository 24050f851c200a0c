"""Module-level functions that tests hand to worker processes (map workers, portion workers, torch
DataLoader workers). A spawned child imports the module of every function it unpickles: this one
imports nothing, so a child pays for what the pipeline needs and not for a test module's imports
(pytest, torch adapters, the test's data)."""

from __future__ import annotations


def key_of(sample):
    """A sample → its "__key__"."""
    return sample["__key__"]


def keys_of_batch(batch):
    """A batch of samples → the list of their keys."""
    return list(batch["__key__"])


def noisy(sample, rng):
    """A sample → the sample with one draw of its rng under "noise" (a stand-in for an augmentation)."""
    return {**sample, "noise": float(rng.random())}


def unchanged(sample):
    """A collate_fn that leaves the item as it is."""
    return sample


def plus_one(x):
    return x + 1
