"""What the user configures and what a model is: config, schema, model specs, workload dimensions."""
