"""What `tensorcom demo` runs: the built-in dataset of coloured shapes (`data`) and its small
classifier (`trainer`)."""
