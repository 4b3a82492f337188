"""How a request and its answer are translated between the client's dialect and the provider's
(``Request.translation``). A plain module of constants: the compiled modules that use them
declare them as C ints in their .pxd and import their values from here."""

SAME_DIALECT = 0          # none: the bytes go to the provider as they are
ANTHROPIC_TO_OPENAI = 1   # an Anthropic client, an OpenAI provider
OPENAI_TO_ANTHROPIC = 2   # an OpenAI client, an Anthropic provider
