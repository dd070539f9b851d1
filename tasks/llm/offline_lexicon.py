"""Vocabulary of the offline provider: role profiles, topic themes and phrasing.

Everything here is data. The offline model (:mod:`tasks.llm.offline_voice` and the
writers) picks from these tables with a hash-seeded dice, so the same request
always yields the same words.

Sentence templates may use these placeholders (filled by ``str.format``):

``{gerund}`` / ``{Gerund}``  "moving our product to usage-based pricing"
``{short}`` / ``{Short}``    "usage-based pricing"
``{role}``                   the speaker's role as given ("Head of Sales")

Position sentences are written impersonally (no "I"), so that summaries can
attribute them to a person without rewriting pronouns. They never contain a
full stop before the end: a position is one sentence.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RoleProfile:
    """How one kind of role talks: its lens, its concerns, its arguments."""

    key: str
    keywords: tuple[str, ...]  # matched as whole words/phrases in the lower-cased role
    lens: str  # "Let me start with {lens}."
    concerns: tuple[str, ...]  # noun phrases: "Dana's point about {concern}"
    support: tuple[str, ...]  # reasons for, full sentences
    oppose: tuple[str, ...]  # reasons against, full sentences
    conditions: tuple[str, ...]  # clauses: "only if {condition}"
    questions: tuple[str, ...]
    details: tuple[str, ...]  # role-flavoured elaboration, stance-neutral
    position_support: tuple[str, ...]
    position_oppose: tuple[str, ...]


PROFILES: tuple[RoleProfile, ...] = (
    RoleProfile(
        key="security",
        keywords=("ciso", "security", "cybersecurity", "infosec", "chief risk officer", "risk"),
        lens="security and risk",
        concerns=(
            "attack surface",
            "data exposure",
            "access control",
            "incident response",
            "audit readiness",
            "third-party risk",
        ),
        support=(
            "Done carefully, {gerund} lets us clean up access control we've been meaning to fix for a year.",
            "The security review I ran came back with nothing we can't mitigate with controls we already "
            "own.",
            "Our attack surface barely changes, and we get better logging out of it, which helps incident "
            "response.",
        ),
        oppose=(
            "{Gerund} widens our attack surface at exactly the moment the team is busiest and least able to "
            "watch it.",
            "Every new integration is another place for data exposure, and we haven't threat-modelled any "
            "of them.",
            "Our audit is in four months; I don't want to explain a half-finished change to the auditors.",
        ),
        conditions=(
            "a threat model is signed off before any customer data moves",
            "access is least-privilege from day one rather than tightened later",
            "we rehearse the incident-response runbook for the new setup before launch",
        ),
        questions=(
            "Who is on the hook if there's a breach during the transition?",
            "Have we threat-modelled the new data flows, or only the old ones?",
        ),
        details=(
            "Most incidents I've handled started in the transition period, when two systems were "
            "half-connected.",
            "Third-party risk is the part people forget: every vendor we add is someone else's breach we "
            "inherit.",
            "I'd rather ship a month late than ship without logging we can actually investigate with.",
            "Audit readiness isn't paperwork; it's proof we know where our data is.",
        ),
        position_support=(
            "{Gerund} is acceptable on security grounds and tightens access control along the way.",
            "The security risk of {short} is manageable with controls we already run.",
        ),
        position_oppose=(
            "{Gerund} widens the attack surface and data exposure beyond what we can monitor this year.",
            "The security and audit risk of {short} outweighs its benefit on the current timeline.",
        ),
    ),
    RoleProfile(
        key="legal",
        keywords=(
            "general counsel",
            "counsel",
            "legal",
            "lawyer",
            "attorney",
            "compliance",
            "regulatory",
            "privacy",
            "gc",
            "clo",
            "solicitor",
        ),
        lens="liability and compliance",
        concerns=(
            "liability",
            "compliance",
            "contract terms",
            "regulatory exposure",
            "data protection",
            "audit trail",
            "notice periods",
        ),
        support=(
            "From a legal standpoint this is clean: our standard terms already allow the change at renewal, "
            "with notice.",
            "Clearer terms reduce our liability, because there are fewer disputes about what a customer "
            "was promised.",
            "I see no regulatory blocker to {short}, and the compliance work is the kind we do routinely.",
        ),
        oppose=(
            "Changing terms mid-contract exposes us to claims, and a good number of our enterprise "
            "agreements "
            "don't allow unilateral changes.",
            "The compliance burden of {short} is real: new disclosures, new consent flows and an audit trail "
            "we don't have today.",
            "Liability follows the data, and {gerund} means holding more of it, for longer, in more places.",
        ),
        conditions=(
            "every affected contract is reviewed and changes only at renewal with proper notice",
            "the new terms are plain enough that no customer can credibly say they were surprised",
            "we keep an audit trail for every billing and data decision from day one",
            "we take external advice on the regulatory position in each market first",
        ),
        questions=(
            "Which contracts let us make this change, and which need the customer's consent?",
            "Who signs off the new terms before they go out?",
            "What is our record-keeping obligation if a customer disputes a charge?",
        ),
        details=(
            "Most of the legal risk sits in the notice period and the wording, not in the decision itself.",
            "Regulators care less about what we do than about whether customers understood it.",
            "I'd want the dispute process designed before launch, not after the first complaint.",
            "Contract terms are the part everyone skips until a customer's lawyer reads them aloud.",
        ),
        position_support=(
            "{Gerund} is legally straightforward under our current terms and manageable on compliance.",
            "The contract and compliance exposure of {short} is low and well understood.",
        ),
        position_oppose=(
            "{Gerund} creates contract liability and compliance exposure that our current agreements "
            "cannot absorb.",
            "The regulatory and contractual risk of {short} outweighs the benefit while our terms stand as "
            "they are.",
        ),
    ),
    RoleProfile(
        key="customer",
        keywords=(
            "customer success",
            "customer experience",
            "customer support",
            "support",
            "cx",
            "client services",
            "customer service",
            "service",
        ),
        lens="customer health",
        concerns=(
            "customer satisfaction",
            "support load",
            "onboarding",
            "renewal health",
            "ticket volume",
            "customer trust",
        ),
        support=(
            "Customers tell my team every week that they want this; {short} answers a complaint we hear "
            "constantly.",
            "Done well, {gerund} makes onboarding easier, and easier onboarding is the best predictor of "
            "renewal.",
            "Our health scores are strongest where customers feel in control, and this gives them more "
            "control.",
        ),
        oppose=(
            "My team will absorb the confusion first: I'd expect ticket volume to double for a quarter.",
            "Customer trust is slow to build and quick to lose, and a change customers didn't ask for "
            "spends it.",
            "Renewal health is already soft in the mid-market; {gerund} adds a reason to shop around.",
        ),
        conditions=(
            "support gets the playbook and training a month before customers hear about it",
            "every customer sees the change explained in their own account, not just in an email",
            "we staff up the support queue for the first ninety days",
        ),
        questions=(
            "What will the first hundred support tickets say, and do we have answers ready?",
            "Who calls the accounts that are already unhappy before they read about this?",
        ),
        details=(
            "Customers forgive change; they don't forgive surprise.",
            "Ticket volume is a lagging signal, so I'd watch sentiment in onboarding calls from week one.",
            "The customers who complain are not the risk; the quiet ones who leave at renewal are.",
            "Support load is a cost the business case usually forgets to count.",
        ),
        position_support=(
            "{Gerund} improves customer satisfaction and onboarding, and customers are already asking for "
            "it.",
            "{Short} strengthens renewal health because customers get more control over what they use.",
        ),
        position_oppose=(
            "{Gerund} will spike support load and erode customer trust at renewal time.",
            "The customer confusion {short} creates outweighs the benefit for the accounts we serve today.",
        ),
    ),
    RoleProfile(
        key="finance",
        keywords=(
            "cfo",
            "finance",
            "financial",
            "controller",
            "treasurer",
            "accountant",
            "accounting",
            "fp&a",
            "chief financial officer",
        ),
        lens="the numbers",
        concerns=(
            "payback",
            "cash flow",
            "gross margin",
            "revenue predictability",
            "unit economics",
            "forecast accuracy",
            "working capital",
        ),
        support=(
            "{Gerund} improves our unit economics: once the one-off costs are behind us, the margin benefit "
            "compounds every quarter.",
            "On the figures I have, {short} pays back inside 18 months, which clears our hurdle rate "
            "comfortably.",
            "Our gross margin has drifted down for three quarters, and {short} is the most credible lever "
            "I've seen to reverse it.",
            "I've run the downside case, and even there the cash curve turns positive by the end of next "
            "year.",
        ),
        oppose=(
            "{Gerund} front-loads the cost and back-loads the benefit, and I can't see payback inside 18 "
            "months.",
            "Our runway has no room for a two-quarter revenue dip, and that is what the transition would "
            "cost us.",
            "Forecast accuracy matters to the board and to our lenders, and {short} would make next year's "
            "numbers much harder to commit to.",
            "The business case leans on optimistic adoption; strip that out and the margin story disappears.",
        ),
        conditions=(
            "we fund a two-quarter pilot from this year's budget and hold a hard payback gate at 18 months",
            "every contract keeps a committed minimum so the revenue forecast can't swing more than ten "
            "percent",
            "the one-off cost stays under ten percent of annual operating spend",
            "we report the cash impact to the board monthly until it turns positive",
        ),
        questions=(
            "What does the cash curve look like in the first two quarters?",
            "Who owns the forecast once revenue moves every month?",
            "What is the downside case, and can we survive it without raising money?",
        ),
        details=(
            "I'd want the model to show margin by customer cohort, because blended averages hide the "
            "customers "
            "who cost us money.",
            "The one-off costs are easy to count; the running costs, headcount and tooling, are what usually "
            "break the budget.",
            "Every quarter of delay in payback is a quarter of runway we don't get back.",
            "I'd rather be roughly right on cash than precisely right on bookings.",
            "The board reads predictability as quality, so anything that adds volatility needs a clear story "
            "attached.",
        ),
        position_support=(
            "{Gerund} pays back inside 18 months on conservative assumptions and strengthens gross margin.",
            "{Short} is financially sound, with a margin gain that outweighs the one-off cost within two "
            "years.",
        ),
        position_oppose=(
            "{Gerund} puts cash flow and forecast accuracy at risk for a payback that is too slow and too "
            "uncertain.",
            "The transition cost and revenue dip of {short} outweigh the margin upside on any realistic "
            "timeline.",
        ),
    ),
    RoleProfile(
        key="tech",
        keywords=(
            "cto",
            "cio",
            "chief technology officer",
            "technology",
            "technical",
            "engineering",
            "engineer",
            "architect",
            "developer",
            "platform",
            "devops",
            "infrastructure",
            "it",
            "sre",
        ),
        lens="the architecture",
        concerns=(
            "architecture",
            "migration risk",
            "technical debt",
            "engineering capacity",
            "hiring",
            "reliability",
            "observability",
        ),
        support=(
            "Architecturally this is overdue: {gerund} lets us retire a layer of technical debt we've been "
            "patching for two years.",
            "The engineering work is well understood; we've built harder things, and the team wants to do "
            "this.",
            "Done properly, {short} simplifies the platform instead of complicating it, and that pays off in "
            "every release after.",
            "The migration risk is manageable if we run old and new side by side and move one segment at a "
            "time.",
        ),
        oppose=(
            "The migration risk is bigger than it looks from outside: {gerund} touches billing, provisioning "
            "and reporting at once.",
            "We'd pull our best engineers off the roadmap for at least two quarters, and we can't hire "
            "replacements that fast.",
            "Every system that has to change is another place for an outage, and our reliability record is "
            "not "
            "something I want to gamble.",
            "We'd be adding architecture we then have to run forever, and the on-call rotation is already "
            "stretched.",
        ),
        conditions=(
            "we run the old and new systems in parallel until the numbers reconcile",
            "two extra engineers are approved before we start, not after",
            "we move one customer segment at a time with a tested rollback path",
            "the rest of the roadmap is frozen for the migration window",
        ),
        questions=(
            "Who builds and runs this while the current roadmap still has to ship?",
            "What is the rollback plan if the cut-over goes wrong on day one?",
            "Have we sized the data work, or only the application changes?",
        ),
        details=(
            "The hard part is never the new code; it's the data migration and the long tail of edge cases in "
            "the old system.",
            "Hiring is the real constraint: senior engineers take four to six months to land and longer to "
            "be "
            "productive here.",
            "I'd want observability in place before the first customer moves, so we see problems before "
            "they do.",
            "A parallel run costs more in the short term, but it's the cheapest insurance we can buy.",
            "Whatever we build has to be owned; I won't ship a system nobody on the team is on call for.",
        ),
        position_support=(
            "{Gerund} is technically sound and reduces technical debt, with migration risk we can manage by "
            "phasing it.",
            "The architecture can carry {short}, and the engineering cost is justified by what it "
            "simplifies.",
        ),
        position_oppose=(
            "{Gerund} carries migration risk and engineering cost that the current team and architecture "
            "cannot absorb this year.",
            "The reliability risk and the hiring gap make {short} the wrong engineering bet right now.",
        ),
    ),
    RoleProfile(
        key="sales",
        keywords=(
            "sales",
            "cro",
            "chief revenue officer",
            "revenue",
            "account executive",
            "business development",
            "commercial",
            "partnerships",
            "bd",
        ),
        lens="our customers and the pipeline",
        concerns=("customers", "pipeline", "churn", "deal cycle", "renewals", "discounting", "win rate"),
        support=(
            "Customers have been asking for this, and I lost deals last quarter to competitors who already "
            "offer it.",
            "{Gerund} lowers the barrier to the first deal: smaller accounts start small and grow with us.",
            "It gives my team a better expansion story, because the upsell happens naturally instead of "
            "through "
            "a renegotiation.",
            "Our pipeline is full of mid-market prospects who stall on the upfront commitment, and this "
            "unblocks them.",
        ),
        oppose=(
            "Our biggest accounts buy predictability, and changing the model on them hands competitors a "
            "reason "
            "to call.",
            "Every change to how we sell resets the deal cycle, so I'd expect this quarter's pipeline to "
            "slip "
            "while reps relearn the pitch.",
            "The churn risk sits in renewals: customers who feel surprised at renewal time don't renew.",
            "My team will end up discounting to get deals over the line, and that eats whatever upside the "
            "model shows.",
        ),
        conditions=(
            "existing customers keep their current terms until renewal",
            "reps get a simple calculator so every customer sees an estimated bill before signing",
            "we pilot it on new mid-market deals before touching the enterprise book",
            "quota is protected for the two quarters of the transition",
        ),
        questions=(
            "What do I tell our top twenty accounts the day this is announced?",
            "How do reps get paid when the deal size isn't known at signing?",
            "Have we asked customers, or are we guessing what they want?",
        ),
        details=(
            "I've sat in enough renewal calls to know that surprise kills accounts, not price.",
            "The pipeline can absorb change, but not ambiguity; reps need one clear story on day one.",
            "Win rates move on simplicity: if a buyer can't explain our offer to procurement, we lose.",
            "Churn shows up two quarters late, which is exactly why we should watch it from the first week.",
            "Our best customers are our references, and whatever we do, they have to hear it from us first.",
        ),
        position_support=(
            "{Gerund} will shorten deal cycles and open the mid-market, and customers are already asking "
            "for it.",
            "{Short} gives the pipeline a lower entry point and a natural expansion path in existing "
            "accounts.",
        ),
        position_oppose=(
            "{Gerund} risks churn in our largest accounts and a stalled pipeline while the team relearns the "
            "pitch.",
            "The renewal risk and the discounting pressure of {short} outweigh the new pipeline it might "
            "open.",
        ),
    ),
    RoleProfile(
        key="marketing",
        keywords=(
            "cmo",
            "marketing",
            "brand",
            "growth",
            "communications",
            "comms",
            "pr",
            "demand generation",
        ),
        lens="the market and the brand",
        concerns=("positioning", "brand trust", "acquisition cost", "messaging", "conversion", "competitors"),
        support=(
            "{Short} gives us a sharper story than anyone in our category has, and positioning is half the "
            "battle.",
            "Our acquisition cost is rising; {gerund} lowers the entry point, and that lifts conversion at "
            "the "
            "top of the funnel.",
            "Competitors are already moving this way, and being second is still better than being last.",
        ),
        oppose=(
            "Our brand is built on simplicity, and {gerund} muddies the one message customers remember us "
            "for.",
            "The messaging is hard: if we need a paragraph to explain the change, the market will explain it "
            "for us, badly.",
            "We'd spend a year of marketing budget re-educating the market instead of growing it.",
        ),
        conditions=(
            "we can explain the change in one sentence on the homepage",
            "we test the messaging with a slice of new visitors before the full launch",
            "existing customers hear about it from us before the press does",
        ),
        questions=(
            "How do we say this in one sentence?",
            "What will competitors say about it the week we launch?",
        ),
        details=(
            "Positioning is a promise, and changing it costs trust we've spent years building.",
            "Conversion lives or dies on the pricing page, so I'd want to test it before we argue about it.",
            "Acquisition cost tells us the market is getting crowded; standing still is also a choice.",
        ),
        position_support=(
            "{Gerund} sharpens our positioning and should lower acquisition cost at the top of the funnel.",
            "{Short} is a competitive message the market will understand and reward.",
        ),
        position_oppose=(
            "{Gerund} muddies our positioning and would cost a year of brand trust to explain.",
            "The messaging risk of {short} outweighs the conversion gain we might get.",
        ),
    ),
    RoleProfile(
        key="product",
        keywords=(
            "cpo",
            "product",
            "chief product officer",
            "product manager",
            "pm",
            "design",
            "ux",
            "user research",
        ),
        lens="the user",
        concerns=("user value", "adoption", "onboarding", "the roadmap", "feature usage", "user experience"),
        support=(
            "The usage data backs this: our most engaged users already behave as if {short} were the model.",
            "{Gerund} aligns what we charge for with the value users actually get, which is the point of a "
            "product.",
            "It frees the roadmap from packaging debates, so we can build for adoption instead of for tiers.",
        ),
        oppose=(
            "{Gerund} would eat the roadmap for two quarters, and users would see nothing new in that time.",
            "Adoption suffers when users have to think about cost every time they click.",
            "Our onboarding is already the weakest part of the experience, and this adds a decision to it.",
        ),
        conditions=(
            "users can see what they're using in the product, in real time",
            "the roadmap keeps at least one user-facing release per quarter during the change",
            "we validate it with a beta cohort before a general launch",
        ),
        questions=(
            "What does a new user see in their first five minutes?",
            "Which roadmap items do we drop to make room?",
        ),
        details=(
            "Feature usage is uneven: a fifth of our features drive most of the value, and that should shape "
            "this.",
            "If users need a spreadsheet to understand the product, we've designed it wrong.",
            "I'd put a beta cohort on it first, because opinions in this room are not user research.",
        ),
        position_support=(
            "{Gerund} aligns price with user value and should lift adoption.",
            "{Short} fits how users already use the product and frees the roadmap to focus on value.",
        ),
        position_oppose=(
            "{Gerund} costs two quarters of roadmap and adds friction to onboarding and adoption.",
            "The user-experience cost of {short} is higher than the value it unlocks for users.",
        ),
    ),
    RoleProfile(
        key="people",
        keywords=(
            "hr",
            "chro",
            "people",
            "talent",
            "human resources",
            "recruiting",
            "culture",
            "chief people officer",
        ),
        lens="our people",
        concerns=("morale", "retention", "hiring", "workload", "compensation", "culture"),
        support=(
            "The team is energised by ambitious bets, and {short} is the kind of change that helps "
            "retention.",
            "It gives people clearer ownership, and clear ownership does more for morale than any perk.",
            "We can staff this: I've already had strong candidates ask whether we'd move in this direction.",
        ),
        oppose=(
            "Workload is already at the edge; {gerund} lands on the same people who carried the last two "
            "projects.",
            "Retention risk is real: the people who would carry this are the ones recruiters call first.",
            "Compensation plans are tied to the current model, and redesigning them mid-year always costs "
            "trust.",
        ),
        conditions=(
            "we hire ahead of the work, not after people are already burning out",
            "compensation plans are redesigned and communicated before the change starts",
            "managers get a clear story to tell their teams on day one",
        ),
        questions=(
            "Who carries this work, and what do they stop doing?",
            "How does this change what we pay people for?",
        ),
        details=(
            "Morale follows clarity; people cope with hard work far better than with uncertainty.",
            "Every change like this is also a retention test for the people we can least afford to lose.",
            "Culture is what people do when the plan meets reality, so the plan has to be realistic.",
        ),
        position_support=(
            "{Gerund} is good for morale and retention if we staff it properly.",
            "Our people can carry {short}, and the ambition helps us hire.",
        ),
        position_oppose=(
            "{Gerund} overloads the same few people and puts retention at risk this year.",
            "The workload and compensation disruption of {short} will cost us people we can't replace.",
        ),
    ),
    RoleProfile(
        key="operations",
        keywords=(
            "coo",
            "operations",
            "ops",
            "chief operating officer",
            "supply chain",
            "logistics",
            "delivery",
            "program",
            "programme",
            "procurement",
        ),
        lens="execution",
        concerns=("execution", "process", "capacity", "service levels", "vendors", "handoffs"),
        support=(
            "Operationally this simplifies things: fewer manual exceptions and fewer handoffs between teams.",
            "We have the capacity this year, which we won't have next year, so {short} is well timed.",
            "The process changes are well understood, and I can name the owner for every step.",
        ),
        oppose=(
            "Execution capacity is the constraint, and {gerund} competes with three programmes already "
            "under way.",
            "Every handoff we add is a place where service levels slip, and this adds several.",
            "Our vendors aren't ready; we'd be building around their gaps for a year.",
        ),
        conditions=(
            "one named owner runs it end to end with a weekly checkpoint",
            "we stop or defer one existing programme to free capacity",
            "service levels are measured before and after so we know what we changed",
        ),
        questions=(
            "Who owns this end to end, and what do they stop doing?",
            "What does the first month look like, step by step?",
        ),
        details=(
            "Plans fail in the handoffs, so I'd map every one of them before we start.",
            "I'd rather run a small version flawlessly than a big one that needs heroics.",
            "Service levels are the customer's view of our operations, and they notice every slip.",
        ),
        position_support=(
            "{Gerund} is executable with current capacity and simplifies our processes.",
            "Operations can deliver {short} this year with a clear owner and plan.",
        ),
        position_oppose=(
            "{Gerund} exceeds our execution capacity and puts service levels at risk.",
            "The process and vendor changes {short} needs can't be delivered this year without dropping "
            "something important.",
        ),
    ),
    RoleProfile(
        key="data",
        keywords=(
            "data",
            "analyst",
            "analytics",
            "scientist",
            "research",
            "researcher",
            "economist",
            "statistician",
            "insights",
        ),
        lens="the evidence",
        concerns=(
            "evidence",
            "the baseline",
            "experiment design",
            "sample size",
            "measurement",
            "attribution",
        ),
        support=(
            "The evidence we have points one way: the cohorts that behave like {short} already retain "
            "better.",
            "The effect size in our pilot data is large enough that I'm not worried it's noise.",
            "Competitor data and our own numbers agree, which doesn't happen often.",
        ),
        oppose=(
            "The evidence for {short} is thin: one cohort, one quarter, and no control group.",
            "We don't have a baseline, so we won't be able to tell whether {gerund} worked.",
            "The numbers people are quoting are averages, and the averages hide the segments where this "
            "fails.",
        ),
        conditions=(
            "we run a controlled experiment with a holdout group first",
            "we agree the success metric and the baseline before launch",
            "the sample is large enough to detect a five percent change",
        ),
        questions=(
            "What result would tell us this failed?",
            "Do we have a baseline to compare against?",
        ),
        details=(
            "Measurement has to be designed before launch; afterwards every result looks like a success.",
            "Attribution is the hard part, because three other things will change in the same quarter.",
            "I'd look at the distribution, not the mean; the tails are where the risk is.",
        ),
        position_support=(
            "The evidence supports {gerund}, with effects large enough to trust.",
            "{Short} is backed by consistent data across our cohorts.",
        ),
        position_oppose=(
            "The evidence for {gerund} is too thin to justify the change.",
            "Without a baseline or a control group, {short} is a guess rather than a decision.",
        ),
    ),
    RoleProfile(
        key="strategy",
        keywords=(
            "ceo",
            "chief executive",
            "founder",
            "co-founder",
            "president",
            "strategy",
            "strategist",
            "chair",
            "board",
            "managing director",
            "general manager",
            "gm",
            "md",
            "vp",
        ),
        lens="strategy",
        concerns=(
            "market position",
            "long-term value",
            "focus",
            "our competitive moat",
            "the investor story",
            "timing",
        ),
        support=(
            "Strategically, {short} is where the market is heading, and I'd rather lead that move than "
            "follow it.",
            "It strengthens our competitive moat: customers who grow with us have fewer reasons to leave.",
            "The timing is right; we have the balance sheet now, and we may not in eighteen months.",
        ),
        oppose=(
            "Focus is our scarcest resource, and {gerund} spends it on something customers aren't asking "
            "for.",
            "It weakens the investor story at exactly the point we need it to be simple.",
            "Our market position is strong as it is; this is a solution looking for a problem.",
        ),
        conditions=(
            "it doesn't pull the leadership team's attention from the two priorities we already set",
            "we can articulate what it does for our market position in one slide",
            "we set a review point at which we're honest about stopping",
        ),
        questions=(
            "What do we stop doing to make room for this?",
            "Where does this leave us in three years if it works, and if it doesn't?",
        ),
        details=(
            "Most strategic mistakes are timing mistakes, so 'not yet' deserves as much scrutiny as 'yes'.",
            "I care about long-term value, but we only get to the long term by surviving the next four "
            "quarters.",
            "Whatever we decide, the team needs to hear one story, told the same way by everyone here.",
        ),
        position_support=(
            "{Gerund} strengthens our market position and long-term value, and the timing is right.",
            "{Short} is the right strategic bet, and waiting would hand the advantage to competitors.",
        ),
        position_oppose=(
            "{Gerund} costs focus we don't have and weakens a market position that is already strong.",
            "The strategic case for {short} is weaker than the distraction it would cause.",
        ),
    ),
)

# Used when no profile matches the role: concerns named after the role itself.
GENERIC = RoleProfile(
    key="generic",
    keywords=(),
    lens="the {role} perspective",
    concerns=(
        "execution risk",
        "cost and timing",
        "the {role} workload",
        "second-order effects",
        "accountability",
    ),
    support=(
        "As {role}, I can see {gerund} making my part of the business simpler, not harder.",
        "The cost is real but bounded, and the upside for the {role} function is larger than it looks.",
        "I'd rather make this change while we have the capacity than be forced into it later.",
    ),
    oppose=(
        "From the {role} side, {gerund} adds work without removing any, and nobody has said what stops.",
        "The second-order effects worry me more than the plan itself, and nobody has mapped them yet.",
        "The timing is wrong for the {role} function: we're mid-way through changes we haven't finished.",
    ),
    conditions=(
        "the {role} team gets the time and budget to do it properly",
        "we agree up front what we'll measure and when we'll review it",
        "someone is accountable for the second-order effects, not just the plan",
    ),
    questions=(
        "What does this change for the {role} team in the first month?",
        "Who is accountable if the second-order effects bite?",
    ),
    details=(
        "In my experience as {role}, the execution risk sits in the details nobody owns.",
        "Cost and timing are linked: a cheap plan done late is an expensive plan.",
        "I'd want a clear review date, so we judge this on results rather than on enthusiasm.",
    ),
    position_support=(
        "{Gerund} makes sense for the {role} function and the cost is bounded.",
        "From the {role} seat, {short} is worth doing now.",
    ),
    position_oppose=(
        "{Gerund} adds execution risk and workload for the {role} function without a clear payoff.",
        "From the {role} seat, {short} is the wrong change at the wrong time.",
    ),
)


@dataclass(frozen=True)
class Theme:
    """What a topic is about: extra facets each kind of role would raise."""

    key: str
    keywords: tuple[str, ...]
    facets: dict[str, tuple[str, ...]]  # profile key (or "*") -> noun phrases


THEMES: tuple[Theme, ...] = (
    Theme(
        key="pricing",
        keywords=(
            "pricing",
            "price",
            "prices",
            "subscription",
            "billing",
            "monetise",
            "monetize",
            "tier",
            "tiers",
            "freemium",
            "discount",
            "seat-based",
            "usage-based",
        ),
        facets={
            "finance": (
                "revenue predictability when bills vary month to month",
                "how we recognise revenue on metered usage",
            ),
            "tech": (
                "metering every billable event accurately",
                "a billing pipeline that never drops or double-counts usage",
            ),
            "sales": (
                "bill shock for our heaviest users",
                "how reps are paid when contract value isn't fixed",
            ),
            "legal": ("contract terms for variable billing", "disclosing how usage is measured"),
            "marketing": ("explaining the new price page in one sentence",),
            "product": ("usage dashboards so customers see what they're spending",),
            "customer": ("support tickets from customers disputing their usage",),
            "*": ("how customers read the new price on day one",),
        },
    ),
    Theme(
        key="migration",
        keywords=(
            "migrate",
            "migration",
            "cloud",
            "kubernetes",
            "rewrite",
            "replatform",
            "microservices",
            "monolith",
            "infrastructure",
            "erp",
            "crm",
            "vendor",
            "platform",
            "on-prem",
            "data centre",
            "data center",
        ),
        facets={
            "finance": ("the double-running cost while old and new systems overlap",),
            "tech": ("the data migration and the cut-over weekend", "what we can decommission afterwards"),
            "sales": ("customer-facing downtime during the cut-over",),
            "legal": ("data residency once the data moves",),
            "security": ("the attack surface during the migration",),
            "operations": ("retraining staff on the new system",),
            "*": ("downtime during the cut-over",),
        },
    ),
    Theme(
        key="people",
        keywords=(
            "hire",
            "hiring",
            "headcount",
            "reorg",
            "remote",
            "office",
            "layoff",
            "layoffs",
            "four-day",
            "restructure",
            "return to office",
            "hybrid",
            "team",
        ),
        facets={
            "finance": ("the fully loaded cost per head",),
            "tech": ("onboarding time before new engineers are productive",),
            "sales": ("ramp time before new reps carry quota",),
            "legal": ("employment law in each jurisdiction",),
            "people": ("what it does to morale on the existing team",),
            "*": ("how the existing team reads the change",),
        },
    ),
    Theme(
        key="expansion",
        keywords=(
            "expand",
            "expansion",
            "international",
            "europe",
            "asia",
            "america",
            "launch",
            "enter",
            "region",
            "country",
            "new market",
            "abroad",
            "global",
        ),
        facets={
            "finance": ("the investment before the new market breaks even",),
            "tech": ("localisation and regional hosting",),
            "sales": ("building a local pipeline from zero",),
            "legal": ("local regulation and tax registration",),
            "marketing": ("brand awareness in a market that doesn't know us",),
            "*": ("how long before the new market stands on its own",),
        },
    ),
    Theme(
        key="ai",
        keywords=(
            "ai",
            "llm",
            "llms",
            "automation",
            "automate",
            "machine learning",
            "ml",
            "gpt",
            "agents",
            "copilot",
            "genai",
        ),
        facets={
            "finance": ("inference cost per customer",),
            "tech": ("evaluating model quality before it reaches customers",),
            "sales": ("customers' appetite for AI features they have to trust",),
            "legal": ("liability for model output and data use",),
            "security": ("prompt injection and data leakage",),
            "people": ("how staff whose work gets automated are treated",),
            "*": ("what happens when the model gets it wrong",),
        },
    ),
    Theme(
        key="acquisition",
        keywords=("acquire", "acquisition", "merge", "merger", "buy", "takeover"),
        facets={
            "finance": ("the premium we'd pay over standalone value",),
            "tech": ("integrating two codebases",),
            "sales": ("cross-selling into the acquired customer base",),
            "legal": ("due diligence and inherited liabilities",),
            "people": ("keeping the acquired team",),
            "*": ("integration in the first hundred days",),
        },
    ),
)

# --- turn phrasing -----------------------------------------------------------

OPENERS_FIRST: tuple[str, ...] = (
    "Let me start with {lens}.",
    "I'll come at {short} from {lens}.",
    "My lens here is {lens}, so that's where I'll start.",
    "I've spent the last week looking at {short} through {lens}, and here is where I've landed.",
    "Thanks. I'll keep this to {lens}, because that's where I can add something.",
)
OPENERS_LATER: tuple[str, ...] = (
    "Having listened to round {prev}, a few responses before I restate my view.",
    "Picking up where we left off in round {prev}.",
    "Let me respond to what I've heard before I go further.",
    "A lot has been said; let me take the points that matter most from {lens}.",
)
OPENERS_FINAL: tuple[str, ...] = (
    "This is our last round, so let me be direct.",
    "To close my part of this, I'll respond briefly and then give my bottom line.",
    "Last round, so I'll focus on what should decide this.",
)

DECLARE: dict[str, tuple[str, ...]] = {
    "support": ("I'm in favour.", "My answer is yes.", "I support it.", "I'd go ahead."),
    "oppose": (
        "I'm against it, at least as proposed.",
        "My answer is no, for now.",
        "I can't support it as it stands.",
        "I'd hold off.",
    ),
    "conditional": (
        "My answer is a qualified yes.",
        "I'd support it, with conditions.",
        "I'm not against it, but I won't sign a blank cheque either.",
        "Yes in principle, but the conditions matter more than the principle.",
    ),
}

# Responding to an earlier speaker. {peer} {concern} {quote} {counter} {my_concern} {lens}
RESPOND_SAME: tuple[str, ...] = (
    "{peer} is right about {concern}, and I'd add {my_concern} to the list.",
    "Like {peer}, I come down on the same side, though my reason is {my_concern} rather than {concern}.",
    '{peer} put it well: "{quote}". From {lens} I see the same thing.',
    "I agree with {peer} on {concern}; it's the strongest argument we've heard so far.",
)
RESPOND_AGAINST: tuple[str, ...] = (
    "I take {peer}'s point about {concern}, but {counter}",
    '{peer} said "{quote}". I read it the other way: {counter}',
    "Where I part company with {peer} is on {concern}: {counter}",
    "{peer}'s worry about {concern} is fair, but it isn't decisive: {counter}",
)
RESPOND_AS_CONDITIONAL: tuple[str, ...] = (
    "{peer} and I are closer than it sounds: the point about {concern} is exactly what my conditions are "
    "built around.",
    "I hear {peer} on {concern}, and that's why I want this conditional rather than a straight answer.",
    '{peer} said "{quote}". I\'d turn that into a condition rather than a verdict.',
)
RESPOND_TO_CONDITIONAL: tuple[str, ...] = (
    "{peer}'s conditions around {concern} are reasonable, and I could live with most of them.",
    "{peer} wants guard-rails around {concern}; fine, but {counter}",
    "I'd accept {peer}'s point about {concern} as a condition, not as a reason to wait.",
)
RESPOND_NO_CONCERN: tuple[str, ...] = (
    '{peer} said "{quote}", and I\'ve thought about that from {lens}.',
    "On {peer}'s point, \"{quote}\": I'll come back to it below.",
)
OWN_EARLIER: tuple[str, ...] = (
    'I said in round {prev} that "{quote}", and nothing I\'ve heard changes that.',
    'My position from round {prev} stands: "{quote}".',
    'Last round I argued that "{quote}"; I still think that\'s the heart of it.',
)
THEME_LINES: tuple[str, ...] = (
    "On {short} specifically, the piece I'd watch is {facet}.",
    "Nobody has yet talked about {facet}, and it lands squarely on my desk.",
    "For me this succeeds or fails on {facet}.",
)
CONDITION_LINES: tuple[str, ...] = (
    "Specifically, I'd need to know that {c1}, and that {c2}.",
    "Two conditions: {c1}, and {c2}.",
    "Concretely, that means {c1}, and it means {c2}.",
)
CONDITIONAL_CORE: tuple[str, ...] = (
    "I can see the case for {gerund}, but only as a staged decision with clear gates.",
    "The upside of {short} is real, and so are the risks; the way through is to make the risks someone's "
    "job.",
    "I'd back {gerund} if we treat it as an experiment we can stop, not a one-way door.",
)
CLOSERS: dict[str, tuple[str, ...]] = {
    "support": ("So my bottom line is to go ahead.", "On balance, the case is strong."),
    "oppose": ("So my bottom line is not now.", "On balance, the risks win."),
    "conditional": ("So my bottom line is yes, if the conditions hold.", "On balance, a gated yes."),
}

# Phrases recognised in other speakers' text, beyond the profiles' concerns and the
# themes' facets: (regular expression, the concern it stands for).
TERM_ALIASES: tuple[tuple[str, str], ...] = (
    (r"pay(?:s|ing)?\s+back|payback", "payback"),
    (r"cash curve|cash flow|cash position", "cash flow"),
    (r"runway", "runway"),
    (r"margin", "margin"),
    (r"forecast", "forecast accuracy"),
    (r"predictab\w+", "predictability"),
    (r"renewals?", "renewals"),
    (r"churn", "churn"),
    (r"pipeline", "pipeline"),
    (r"discount\w*", "discounting"),
    (r"quota", "quota"),
    (r"bill shock", "bill shock"),
    (r"meter\w*", "metering"),
    (r"migrat\w+", "migration risk"),
    (r"engineers?|on-call", "engineering capacity"),
    (r"roadmap", "the roadmap"),
    (r"outages?|reliability", "reliability"),
    (r"technical debt", "technical debt"),
    (r"contracts?", "contract terms"),
    (r"liabilit\w+", "liability"),
    (r"complian\w+", "compliance"),
    (r"regulat\w+", "regulatory exposure"),
    (r"onboarding", "onboarding"),
    (r"morale", "morale"),
    (r"attack surface", "attack surface"),
    (r"positioning", "positioning"),
    (r"competitors?", "competitors"),
)

# What each kind of role would own after the meeting ("Dana to ...").
NEXT_STEPS: dict[str, str] = {
    "finance": "build the cash model for a pilot and set the payback gate",
    "tech": "scope the engineering work, the parallel run and the rollback plan",
    "sales": "sound out our top accounts and draft the story for the sales team",
    "legal": "review which contracts allow the change and draft the notice",
    "marketing": "test the message with a slice of new visitors",
    "product": "define the beta cohort and what users will see",
    "people": "work out who carries the work and what they stop doing",
    "operations": "name an owner and map the handoffs",
    "data": "agree the success metric and the baseline",
    "strategy": "set the review point and the criteria for stopping",
    "customer": "prepare the support playbook and call the accounts most at risk",
    "security": "run the threat model on the new data flows",
    "generic": "write down what changes for their function in the first month",
}

# Concerns too common as words to show what a sentence is about ("focus", "process").
TOO_COMMON: frozenset[str] = frozenset(
    {
        "focus",
        "timing",
        "process",
        "execution",
        "capacity",
        "evidence",
        "culture",
        "customers",
        "measurement",
        "workload",
        "vendors",
        "handoffs",
        "hiring",
    }
)
