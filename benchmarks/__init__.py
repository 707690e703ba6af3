"""Benchmarks of srcad against its peers: `python -m benchmarks` (README.md); the standalone scripts here
run on their own too."""
