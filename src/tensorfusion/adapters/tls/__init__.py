"""TLS material the processes serve with."""
