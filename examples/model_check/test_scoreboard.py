"""A plain test of the scoreboard on the kit's fixture (the README's first example)."""

from scoreboard import Board, GetScore, Score, app


async def test_scores_add_up(zlink_store) -> None:  # type: ignore[no-untyped-def]
    async with zlink_store.open_host(app) as host:
        await host.spots.get_or_create("chess", "games.Scoreboard").submit()
        for points in (3, 4):
            await host.route.send_to_spot("chess", Score("ada", points)).submit()
        await host.wait_quiet()
        board = await host.route.request_to_spot("chess", GetScore(), reply_type=Board).submit()
        assert {"ada": 7} == board.points
