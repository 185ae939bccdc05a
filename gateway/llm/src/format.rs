//! The two wire formats of the LLM endpoints: the Anthropic Messages API and OpenAI Chat
//! Completions. A client always speaks the format of the model's provider (the gateway does not
//! translate between them). What the loop does differently per format is in `crate::wire`.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Anthropic,
    OpenAi,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Anthropic => "messages",
            Format::OpenAi => "chat_completions",
        }
    }
}
