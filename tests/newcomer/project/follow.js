const conversation = "PASTE-THE-CONVERSATION-ID";
const socket = new WebSocket(`ws://${location.host}/ws/conversations/${conversation}/`);
const frames = [];
let answer = "";
socket.onopen = () => socket.send(JSON.stringify({type: "attach"}));
socket.onmessage = (event) => {
  const frame = JSON.parse(event.data);
  frames.push(frame);
  if (frame.type === "delta") answer = answer.slice(0, frame.offset) + frame.text;
  if (frame.type === "interrupt") console.log("The agent asks:", frame.interrupts[0].payload);
  if (frame.type === "final") console.log(frame.stop_reason, frame.message.content);
};
