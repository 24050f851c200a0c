"""What `tensorcom demo` runs: the built-in dataset of coloured shapes (`data`), its small classifier
(`trainer`), the serve-imagenet-dir subprocess (`server`) and the run that ties them together
(`run.run_demo`)."""
