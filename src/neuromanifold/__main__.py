"""``python -m neuromanifold``: the command line (also the torchrun entry point).

``torchrun --nproc_per_node 2 -m neuromanifold read ...`` runs the data-parallel read (see
`neuromanifold.singular.distributed`).
"""

from neuromanifold.cli import main

if __name__ == "__main__":
    main()
