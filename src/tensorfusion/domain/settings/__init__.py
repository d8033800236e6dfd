"""Process settings read from command lines and environments (pure parsing and validation)."""
