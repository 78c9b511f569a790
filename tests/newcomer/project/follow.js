const conversation = "PASTE-THE-CONVERSATION-ID";
const { ConversationClient, conversationUrl } = await import("/static/agent_persistence/client/index.js");
const client = new ConversationClient({ url: conversationUrl(location.origin, conversation) });
client.on("text", ({ text }) => console.log(text));
client.on("interrupt", ({ interrupts }) => console.log("The agent asks:", interrupts[0].payload));
client.on("final", (final) => console.log(final.stop_reason, final.message.content));
await client.connect();
