"""The contracts between zmqload's parts, each stated once, as types. Pure data: nothing
here imports the engine or any other part of zmqload, so every layer can import it."""
