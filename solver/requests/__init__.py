"""What each job kind is asked to do, checked once, and the one way it is run.

`AnimateRequest` / `run_animate` (animate.py) stand behind both front doors, the command line
(solver/cli.py) and job folders (solver/jobs.py); fields.py holds the checks they share.
Importing this package loads nothing heavy: each module imports the solver's parts it runs.
"""
