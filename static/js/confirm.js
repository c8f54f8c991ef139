// Asks for confirmation before buttons that change what a pool runs. Delegated from the document, so buttons
// added after load (an incident card that arrives live on the on-call page) ask too.
document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-confirm]");
  if (button && !window.confirm(button.dataset.confirm)) event.preventDefault();
});
