"""Runtime operations state that reaches the nodes beside the template: conversation overrides and the policy bundle."""
