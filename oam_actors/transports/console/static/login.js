// The sign-in form: POST /console/login with the token as a bearer token (no body, so nothing of it
// lands in a URL or a log), then load the console, which the cookie set by the answer opens.
"use strict";

document.getElementById("sign-in").addEventListener("submit", async (event) => {
  event.preventDefault();
  const message = document.getElementById("message");
  const token = document.getElementById("token").value.trim();
  message.textContent = "Signing in…";
  try {
    const answer = await fetch("/console/login", {
      method: "POST",
      headers: { Authorization: "Bearer " + token },
      credentials: "same-origin",
    });
    if (answer.ok) {
      window.location.replace("/console");
      return;
    }
    message.textContent = answer.status === 401 ? "✕ That token is not valid." : "✕ Sign-in failed: HTTP " + answer.status + ".";
  } catch (error) {
    message.textContent = "✕ The server cannot be reached: " + error.message;
  }
});
