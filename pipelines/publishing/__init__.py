"""Publishing: when approved posts go out, by a schedule's slots."""
