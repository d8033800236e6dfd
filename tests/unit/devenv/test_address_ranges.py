"""Each dev environment takes loopback ranges whose fixed ports are free."""

from __future__ import annotations

import socket

from tensorfusion.devenv.address_ranges import CONTROLLER_API_PORT, free_address_ranges


def test_a_taken_controller_port_moves_the_environment_to_the_next_ranges() -> None:
    first = free_address_ranges(2)
    assert first.controllers.startswith("127.0.") and first.controllers.endswith(".")
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind((f"{first.controllers}3", CONTROLLER_API_PORT))
        taken.listen()
        second = free_address_ranges(2)
    assert second != first
    assert int(second.controllers.split(".")[2]) > int(first.controllers.split(".")[2])
    assert len({second.controllers, second.alertmanagers, second.nodes}) == 3
