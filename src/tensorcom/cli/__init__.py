"""Command-line entry points: parse arguments, call the library, print. No logic of their own."""
