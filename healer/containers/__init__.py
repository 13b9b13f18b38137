"""Docker, below the fleet and the loop: the client that has answered (`client`), the offline images healer runs
agents, gates and the repair agent in (`images`, `python -m healer.containers.images` / `make images`), and how a
program runs as a container's PID 1 (`run`: its init, its exit code). The fleet's container runtime, the loop's
container sandbox and the repair agent's container all build on it; it imports none of them."""
