"""Running the loop for a surface: the one loop entry (:mod:`.entry`), pytest as a child process
(:mod:`.pytest_run`) and the final status as an exit code (:mod:`.outcome`)."""
