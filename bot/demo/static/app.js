// The gatehouse demo's web chat: follows the operator's chat with the bot (served by
// bot/demo/webchat.py) and sends what the person types or taps. Plain JS, no build step.
// Text is always inserted as text nodes: formatting comes from Telegram's entities.
"use strict";

const chat = document.getElementById("chat");
const statusLine = document.getElementById("status");
const toast = document.getElementById("toast");
const form = document.getElementById("send-form");
const input = document.getElementById("text");
const replying = document.getElementById("replying");
const replyingText = document.getElementById("replying-text");

let revision = 0;
let replyTo = null; // the bot's ForceReply message an edit answers
let scrollDown = true; // after the person acts, show the bot's answer at the bottom
let seenForceReply = null; // prompts already there when this chat was first shown
let firstDraw = true; // the chat's first drawing shows history: nothing in it is news
const pendingTaps = new Map(); // query id -> the tapped button, until the bot answers
// Who the page speaks as: one of the demo's operators, kept in the address (#as=1002)
// so a reload shows the same chat; null: the server's first operator.
let speakAs = Number(new URLSearchParams(location.hash.slice(1)).get("as")) || null;
// Whether the page shows the team room (a group the operators are in) instead of the
// operator's private chat; kept in the address too (#as=1002&room=1).
let inRoom = new URLSearchParams(location.hash.slice(1)).get("room") === "1";

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ ...body, ...(speakAs === null ? {} : { as: speakAs }), ...(inRoom ? { room: true } : {}) }),
  };
  const response = await fetch(path, init);
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || `HTTP ${response.status}`);
  return data;
}

// -- rendering Telegram text -----------------------------------------------------------

const TAGS = {
  bold: "b", italic: "i", underline: "u", strikethrough: "s", code: "code", pre: "pre",
  spoiler: "span", blockquote: "blockquote", expandable_blockquote: "blockquote",
  text_link: "a", url: "a",
};

function wrap(node, entity, text) {
  const tag = TAGS[entity.type];
  if (!tag) return node;
  const element = document.createElement(tag);
  if (tag === "a") {
    const href = entity.type === "url" ? text : entity.url;
    if (!/^https?:\/\//i.test(href || "")) return node; // only web links are clickable
    element.href = href;
    element.target = "_blank";
    element.rel = "noopener noreferrer";
  }
  if (entity.type === "spoiler") element.className = "spoiler";
  if (tag === "code" || tag === "pre") {
    // Telegram copies a tapped code block; the page puts it in the message box too, so
    // "tap the draft to copy it" leaves the draft ready to change and send.
    element.classList.add("copyable");
    element.title = "tap to copy";
    element.addEventListener("click", () => copyToInput(text));
  }
  element.appendChild(node);
  return element;
}

function copyToInput(text) {
  input.value = text;
  grow();
  input.focus();
  if (navigator.clipboard) navigator.clipboard.writeText(text).catch(() => {}); // http: may refuse
  flash("Copied: change it below and send");
}

// Entity offsets count UTF-16 code units, which is what JS string indices count too.
function renderText(text, entities) {
  const cuts = new Set([0, text.length]);
  for (const e of entities) { cuts.add(e.offset); cuts.add(e.offset + e.length); }
  const points = [...cuts].filter((p) => p <= text.length).sort((a, b) => a - b);
  const fragment = document.createDocumentFragment();
  for (let i = 0; i + 1 < points.length; i++) {
    const [start, end] = [points[i], points[i + 1]];
    const piece = text.slice(start, end);
    let node = document.createTextNode(piece);
    // Shortest first: the innermost entity wraps the text, the longest ends up outermost.
    const covering = entities
      .filter((e) => e.offset <= start && e.offset + e.length >= end)
      .sort((a, b) => a.length - b.length);
    for (const e of covering) node = wrap(node, e, text.slice(e.offset, e.offset + e.length));
    fragment.appendChild(node);
  }
  return fragment;
}

function time(unixSeconds) {
  return new Date(unixSeconds * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

function renderKeyboard(message) {
  const rows = (message.reply_markup && message.reply_markup.inline_keyboard) || [];
  const keyboard = document.createElement("div");
  keyboard.className = "keyboard";
  for (const row of rows) {
    const line = document.createElement("div");
    line.className = "row";
    for (const key of row) {
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = key.text;
      if (key.callback_data) {
        button.addEventListener("click", () => tap(message.message_id, key.callback_data, button));
      } else if (key.url) {
        button.addEventListener("click", () => window.open(key.url, "_blank", "noopener"));
      }
      line.appendChild(button);
    }
    keyboard.appendChild(line);
  }
  return keyboard;
}

// A reply shows the start of the message it answers, as Telegram does; a tap on it
// scrolls there.
function renderQuote(replied) {
  const quote = document.createElement("div");
  quote.className = "quote";
  quote.textContent = replied ? replied.text.split("\n")[0].slice(0, 80) : "a message no longer here";
  if (replied) {
    quote.addEventListener("click", () => {
      const target = chat.querySelector(`.msg[data-message-id="${replied.message_id}"]`);
      if (target) target.scrollIntoView({ block: "center" });
    });
  }
  return quote;
}

// A card's image: its link preview (the picture at `url`), as Telegram shows it.
function linkPreview(options) {
  if (!options || options.is_disabled || !options.url) return null;
  const picture = document.createElement("img");
  picture.className = "preview" + (options.prefer_large_media ? " large" : "");
  picture.alt = "";
  picture.src = options.url;
  return picture;
}

function renderMessage(message, byId) {
  const item = document.createElement("div");
  item.className = "msg " + (message.from_bot ? "bot" : "me");
  item.dataset.messageId = message.message_id;
  item.dataset.version = message.version;
  const bubble = document.createElement("div");
  bubble.className = "bubble";
  if (message.reply_to_message_id) {
    item.dataset.replyTo = message.reply_to_message_id;
    bubble.appendChild(renderQuote(byId.get(message.reply_to_message_id)));
  }
  const preview = linkPreview(message.link_preview_options);
  if (preview && message.link_preview_options.show_above_text) bubble.appendChild(preview);
  if (message.photo) {  // a chart: the picture, then its caption
    item.classList.add("chart");
    const picture = document.createElement("img");
    picture.className = "photo";
    picture.alt = message.text;
    picture.src = "/api/photo?message_id=" + message.message_id + (speakAs === null ? "" : "&as=" + speakAs) + (inRoom ? "&room=1" : "");
    bubble.appendChild(picture);
  }
  const body = document.createElement("div");
  body.className = "text";
  body.appendChild(renderText(message.text, message.entities || []));
  const meta = document.createElement("div");
  meta.className = "meta";
  meta.textContent = (message.version > 1 ? "edited " : "") + time(message.edit_date || message.date);
  bubble.append(body);
  if (preview && !message.link_preview_options.show_above_text) bubble.appendChild(preview);
  bubble.append(meta);
  item.appendChild(bubble);
  if (message.reply_markup && message.reply_markup.inline_keyboard) {
    item.appendChild(renderKeyboard(message));
  }
  if (isDeadlineWarning(message)) item.classList.add("warning");
  if (isSystemLine(message)) item.classList.add("system");
  return item;
}

// The bot's notes about its own upkeep (the day's signed audit head, a new signing key):
// worth keeping, not worth the first line of the page. Shown quietly, below the rest.
const SYSTEM_LINES = /^(🔏 audit head |🔑 a new audit signing key)/;
function isSystemLine(message) {
  return message.from_bot && SYSTEM_LINES.test(message.text) && !message.reply_markup;
}

// A chart that arrives while one watches is brought wholly into view once its picture
// has loaded: scrolling to the bottom before then leaves its lower part below the fold.
function showWhenLoaded(item) {
  const picture = item.querySelector("img.photo");
  if (!picture) return;
  picture.addEventListener("load", () => {
    const tall = item.offsetHeight > chat.clientHeight;
    item.scrollIntoView({ block: tall ? "start" : "end" });
  }, { once: true });
}

// An SLA warning one can still act on: "⏳ item 7 (urgent) is waiting for approval, 40 s
// left" with its buttons. It must not scroll by unseen under a pile of cards.
function isDeadlineWarning(message) {
  const buttons = message.reply_markup && message.reply_markup.inline_keyboard;
  return message.from_bot && /^⏳ item \d+/.test(message.text) && / left$/.test(message.text)
    && Boolean(buttons && buttons.length);
}

// -- following the chat ------------------------------------------------------------------

function render(state) {
  if (speakAs !== null && state.user_id !== speakAs) return; // an answer from before a switch
  if (state.room && state.room.open !== inRoom) return;
  // Named as the cards name people ("Alex (@alex)"), not by a number.
  const names = state.names || {};
  document.getElementById("operator").textContent = names[state.user_id] || "operator " + state.user_id;
  renderOperators(state.operators || [state.user_id], state.user_id, state.room, names);
  const nearBottom = chat.scrollHeight - chat.scrollTop - chat.clientHeight < 80;
  const known = new Map([...chat.querySelectorAll(".msg")].map((el) => [el.dataset.messageId, el]));
  const messages = state.messages.filter((m) => !m.deleted);
  const byId = new Map(messages.map((m) => [m.message_id, m]));
  let added = false;
  let warned = null; // a deadline warning that just arrived: shown wherever one is reading
  for (const message of messages) {
    const id = String(message.message_id);
    const old = known.get(id);
    known.delete(id);
    if (old && old.dataset.version === String(message.version)) continue;
    const fresh = renderMessage(message, byId);
    if (old) {
      old.replaceWith(fresh);
      fresh.classList.add("changed"); // edited in place: flash it once
    } else {
      chat.appendChild(fresh);
      added = true;
      if (!firstDraw) showWhenLoaded(fresh);
      if (fresh.classList.contains("warning")) warned = fresh;
    }
  }
  for (const gone of known.values()) gone.remove();
  document.getElementById("empty").hidden = messages.length > 0;
  followForceReply(messages);
  if (added && (nearBottom || scrollDown)) {
    chat.scrollTop = chat.scrollHeight;
    scrollDown = false;
  }
  if (warned && !firstDraw) {
    warned.scrollIntoView({ block: "center" });
    flash(warned.querySelector(".text").textContent.split("\n")[0]);
  }
  firstDraw = false;
  showAnswers(state.answers);
  renderChips(state.commands);
}

// The Edit button makes the bot ask for the new text with ForceReply, like Telegram does.
// Prompts already in the chat when it is first shown (a reload, another operator's chat)
// never start reply mode: only one that arrives while the page watches does.
function followForceReply(messages) {
  const prompts = messages.filter((m) => m.from_bot && m.reply_markup && m.reply_markup.force_reply);
  if (seenForceReply === null) {
    seenForceReply = new Set(prompts.map((m) => m.message_id));
    return;
  }
  for (const m of prompts) {
    if (!seenForceReply.has(m.message_id)) {
      seenForceReply.add(m.message_id);
      scrollDown = true;
      setReplyTo(m.message_id, m.reply_markup.input_field_placeholder);
    }
  }
}

// The banner says what the reply will do, in the bot's own words for that prompt.
function setReplyTo(messageId, what) {
  replyTo = messageId;
  replying.hidden = messageId === null;
  replyingText.textContent = `Replying to the bot: ${what || "your text answers its question"}`;
  input.placeholder = messageId === null ? "Type a command, e.g. /status" : what || "Your reply";
  if (messageId !== null) input.focus();
}

function showAnswers(answers) {
  for (const [id, button] of pendingTaps) {
    if (id in answers) {
      pendingTaps.delete(id);
      button.disabled = false; // a card that changed has new buttons (or none) anyway
      if (answers[id]) flash(answers[id]);
    }
  }
}

let toastTimer = null;
function flash(text) {
  toast.textContent = text;
  toast.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { toast.hidden = true; }, 2500);
}

let chipsShown = "";
function renderChips(commands) {
  const names = (commands.length ? commands.map((c) => c.command) : ["status", "pending", "budget", "help"])
    .filter((name) => ["status", "pending", "budget", "help"].includes(name));
  if (names.join() === chipsShown) return;
  chipsShown = names.join();
  const chips = document.getElementById("chips");
  chips.replaceChildren(...names.map((name) => {
    const chip = document.createElement("button");
    chip.type = "button";
    chip.textContent = "/" + name;
    chip.addEventListener("click", () => send("/" + name));
    return chip;
  }));
}

let operatorsShown = "";
function renderOperators(operators, current, room, names) {
  const key = operators.join() + ":" + current + ":" + inRoom;
  if (key === operatorsShown) return;
  operatorsShown = key;
  const box = document.getElementById("operators");
  box.hidden = operators.length < 2 && !room;
  const chips = operators.map((id) => {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = names[id] || "operator " + id; // as the cards name them
    button.setAttribute("aria-pressed", String(id === current));
    button.addEventListener("click", () => switchTo(id, inRoom));
    return button;
  });
  if (room) {  // the team room: the same operator, in the group instead of their chat
    const button = document.createElement("button");
    button.type = "button";
    button.className = "room";
    button.textContent = "👥 " + room.title;
    button.setAttribute("aria-pressed", String(inRoom));
    button.addEventListener("click", () => switchTo(current, !inRoom));
    chips.push(button);
  }
  box.replaceChildren(...chips);
}

// Show another operator's chat: the page forgets what it drew for the last one.
function switchTo(id, room) {
  speakAs = id;
  inRoom = room;
  history.replaceState(null, "", "#as=" + id + (room ? "&room=1" : ""));
  chat.querySelectorAll(".msg").forEach((el) => el.remove());
  seenForceReply = null;
  firstDraw = true;
  setReplyTo(null);
  scrollDown = true;
  refresh();
}

async function refresh() {
  const query = new URLSearchParams();
  if (speakAs !== null) query.set("as", speakAs);
  if (inRoom) query.set("room", "1");
  const state = await api("/api/chat" + (query.size ? "?" + query : ""));
  render(state);
  return state;
}

async function follow() {
  for (;;) {
    try {
      const state = await refresh();
      render(state);
      revision = state.revision;
      statusLine.textContent = "bot · online";
      statusLine.classList.remove("offline");
      await api(`/api/wait?after=${revision}&timeout=20`);
    } catch (error) {
      statusLine.textContent = "disconnected: is `gatehouse demo` still running?";
      statusLine.classList.add("offline");
      await new Promise((resolve) => setTimeout(resolve, 2000));
    }
  }
}

// -- acting as the operator --------------------------------------------------------------

async function tap(messageId, data, button) {
  button.disabled = true;
  try {
    const { query_id } = await api("/api/tap", { message_id: messageId, data });
    pendingTaps.set(query_id, button);
  } catch (error) {
    flash(error.message);
    button.disabled = false;
  }
}

async function send(text) {
  const body = { text };
  if (replyTo !== null && !text.startsWith("/")) body.reply_to_message_id = replyTo;
  scrollDown = true;
  try {
    await api("/api/send", body);
    if (body.reply_to_message_id !== undefined) setReplyTo(null);
  } catch (error) {
    flash(error.message);
  }
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  const text = input.value.trim();
  if (!text) return;
  input.value = "";
  grow();
  send(text);
});
// Enter sends, as in a chat app; Shift+Enter starts a new line of a draft.
input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    form.requestSubmit();
  }
});
input.addEventListener("input", grow);

// The message box grows with its text (up to its CSS max-height, then it scrolls), so a
// long draft is seen whole, wrapped, while it is edited.
function grow() {
  input.style.height = "auto";
  const border = input.offsetHeight - input.clientHeight;
  input.style.height = input.scrollHeight + border + "px";
}
document.getElementById("cancel-reply").addEventListener("click", () => setReplyTo(null));

follow();
