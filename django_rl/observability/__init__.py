"""What the limits do, seen from outside: denials reported (signal, log)."""
