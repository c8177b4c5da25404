"""A model on a task, as every stage after training uses it: loaded with its task's head (`task_model`),
checked against its tokenizer and the task (`fits`), run on a task's features (`run`), with the settings a
fine-tuned folder keeps (`finetuned`) and its early-exit rule (`exits`). It stands before training: the
fine-tuning loop, `albert evaluate` and the deploy commands all take it from here, so deploy needs of
training nothing but the model folder it saved."""
