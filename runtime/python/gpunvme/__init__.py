"""gpunvme's Python side (issue 37). For now: the chat-template renderer the OpenAI-compatible server uses
(gpunvme.chat_template); the server and the engine's bindings come later."""
