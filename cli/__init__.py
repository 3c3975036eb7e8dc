"""`openenv-hub`: the command line for publishers of OpenEnv environments.

    openenv-hub check DIR|URL       the hub's own checks, on your machine, with the workers' code
    openenv-hub push [DIR]          check, publish to the Hugging Face Hub, have the hub validate it, wait
    openenv-hub search QUERY        the catalog
    openenv-hub info OWNER/NAME     one environment: verdict, failing checks, pull forms, badge
    openenv-hub login | logout      a personal token for the hub, kept in a 0600 file

The commands that only read the hub's REST API (search, info, login, logout) import neither Django nor the
probe: `main` imports what a command needs when it runs. `check` runs `registry.probing` (no Django either).
Modules: `main` (arguments, exit codes), `config` (where the hub is, the token), `api` (the REST API over
httpx), `output` (colour, progress, rendering), `checking` (check), `publishing` (push).
"""
