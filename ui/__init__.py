"""App-layer helpers of the Chainlit UI. Only modules under ui/ and app.py may import chainlit."""
