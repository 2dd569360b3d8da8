"""The HTTP side of a Decision: its headers, the 429, and deciding on DRF views."""
