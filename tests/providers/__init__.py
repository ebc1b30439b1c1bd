"""The provider matrix: real LangChain provider packages against a local server speaking each
provider's documented wire format."""
