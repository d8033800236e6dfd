"""The mutating pod webhook (admission.md): served by every controller replica on HTTPS 9443,
answering AdmissionReviews with the domain's admission pipeline (`domain.admission.admit`)."""
