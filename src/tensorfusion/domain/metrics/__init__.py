"""Pure metrics logic: the `tf_*` table schemas, rows, line protocol, retention and recorders."""
